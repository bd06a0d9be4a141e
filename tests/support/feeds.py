"""The feed world (a pytest plugin): Celery workers running the feed tasks
(and the typeahead's) on PinLater, over the app-data store and the HBase
pair (``tests.feeds.world``), over the store setup of the ``backend``
parameter ("redis", "mysql", "redis+thrift" through a ``pinlater
server``, "redis+tls" through one with TLS and roles, or "redis+contacts"
with the typeahead's updates through a Contacts Service);
``@pytest.mark.feed_settings(page_size=100, ...)`` sets its workers'
``PINLATER_FEED_*``. Used by the feed and typeahead tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pinlater.kit.tls import ClientTls
    from tasks.appdata.store import AppData
    from tasks.hbase import ClusterPair
    from tasks.typeahead.service import ContactsServer
    from tests.feeds.world import FeedWorld
    from tests.support.tls import Certs

THRIFT = "+thrift"
# Through a ``pinlater server`` with TLS and roles: the workers hold the
# worker role's certificate, the application's client the producer's.
TLS = "+tls"
# The typeahead's jobs write the index through a Contacts Service of the
# test's own (in its process, on its app data and HBase pair).
CONTACTS = "+contacts"


@pytest.fixture
def world(
    request: pytest.FixtureRequest, servers: None, appdata: AppData, pair: ClusterPair, tmp_path: Path
) -> Iterator[FeedWorld]:
    from tests.feeds.world import feed_world

    backend = str(getattr(request, "param", "redis"))
    stores = backend.removesuffix(THRIFT).removesuffix(TLS).removesuffix(CONTACTS)
    address = None
    tls: dict[str, ClientTls] = {}
    if backend.endswith(THRIFT):
        server: Callable[[str], str] = request.getfixturevalue("thrift_server")
        address = server(stores)
    elif backend.endswith(TLS):
        address = request.getfixturevalue("tls_thrift_server")(stores)
        certs: Certs = request.getfixturevalue("tls_certs")
        tls = {"workers": certs.client("tls-worker"), "app": certs.client("tls-producer")}
    marker = request.node.get_closest_marker("feed_settings")
    overrides = dict(marker.kwargs) if marker else {}
    with contextlib.ExitStack() as stack:
        extra_env = {}
        calls = None
        if backend.endswith(CONTACTS):
            contacts = stack.enter_context(_contacts_service(appdata, pair))
            extra_env["PINLATER_TYPEAHEAD_SERVICE"] = f"127.0.0.1:{contacts.port}"

            def calls() -> dict[str, int]:
                methods: dict[str, dict[str, int]] = contacts.stats.snapshot()["methods"]  # type: ignore[assignment]
                return {name: m["requests"] for name, m in methods.items()}

        with feed_world(stores, address, appdata, pair, tmp_path, tls=tls, extra_env=extra_env, **overrides) as w:
            w.contacts_calls = calls
            yield w


@contextlib.contextmanager
def _contacts_service(appdata: AppData, pair: ClusterPair) -> Iterator[ContactsServer]:
    from tasks.typeahead.index import ContactsIndex
    from tasks.typeahead.runtime import TypeaheadRuntime
    from tasks.typeahead.service import ContactsServer
    from tasks.typeahead.settings import TypeaheadSettings

    settings = TypeaheadSettings()
    server = ContactsServer(ContactsIndex(pair, settings).lookup, "127.0.0.1", 0,
                            writer=TypeaheadRuntime(settings, appdata, pair)).start()
    try:
        yield server
    finally:
        server.stop(grace_s=5)
