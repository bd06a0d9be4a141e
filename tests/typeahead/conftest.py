"""Fixtures of the typeahead tests: a typeahead server over the in-process
index of ``tests.typeahead.support`` (no HBase) for the endpoint tests, and
the lookup over the real HBase pair. The
app-data store, the HBase pair, ``world`` (Celery workers on PinLater) and
headless Chromium come from the plugins of ``tests.support``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tasks.hbase import ClusterPair
from tasks.typeahead.http import TypeaheadServer
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.settings import TypeaheadSettings
from tests.typeahead.support import FakeIndex


@pytest.fixture(scope="module")
def fake_index() -> FakeIndex:
    return FakeIndex()


@pytest.fixture(autouse=True)
def _forget_calls(request: pytest.FixtureRequest) -> None:
    if "fake_index" in request.fixturenames:
        request.getfixturevalue("fake_index").calls.clear()


@pytest.fixture(scope="module")
def server(fake_index: FakeIndex) -> Iterator[TypeaheadServer]:
    server = TypeaheadServer(fake_index.lookup, "127.0.0.1", 0, request_timeout_s=5.0).start()
    yield server
    server.stop()


@pytest.fixture
def index(pair: ClusterPair) -> ContactsIndex:
    """The lookup over the HBase pair of ``tests.support``, asking the
    standby only once the primary has failed: these tests check what the
    primary holds, however slow a busy machine makes it."""
    return ContactsIndex(pair, dataclasses.replace(TypeaheadSettings.from_env(), standby_after_ms=0))
