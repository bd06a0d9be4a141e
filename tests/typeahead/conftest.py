"""Fixtures of the typeahead tests: the app-data store and the HBase pair of
tests/appdata and tests/hbase (real MariaDB and both real HBase clusters,
per-session databases and tables), ``world`` (Celery workers on PinLater,
tests.feeds.world) for the task tests, and a typeahead server over the
in-process index of ``tests.typeahead.support`` (no HBase) for the endpoint
tests; headless Chromium (``browser_context``) is tests/conftest.py's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks.typeahead.http import TypeaheadServer
from tests.appdata.conftest import appdata  # noqa: F401  (a fixture, used by name)
from tests.feeds.conftest import world  # noqa: F401  (a fixture, used by name)
from tests.hbase.conftest import pair  # noqa: F401  (a fixture, used by name)
from tests.typeahead.support import FakeIndex
from tests.workers.conftest import thrift_server  # noqa: F401  (a fixture, used by name)


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
