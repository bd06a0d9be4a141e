"""The feed world (a pytest plugin): Celery workers running the feed tasks
(and the typeahead's) on PinLater, over the app-data store and the HBase
pair (``tests.feeds.world``), over the store setup of the ``backend``
parameter ("redis", "mysql", "redis+thrift" through a ``pinlater
server``, or "redis+tls" through one with TLS and roles); ``@pytest.mark.feed_settings(page_size=100, ...)`` sets its
workers' ``PINLATER_FEED_*``. Used by the feed and typeahead tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pinlater.kit.tls import ClientTls
    from tasks.appdata.store import AppData
    from tasks.hbase import ClusterPair
    from tests.feeds.world import FeedWorld
    from tests.support.tls import Certs

THRIFT = "+thrift"
# Through a ``pinlater server`` with TLS and roles: the workers hold the
# worker role's certificate, the application's client the producer's.
TLS = "+tls"


@pytest.fixture
def world(
    request: pytest.FixtureRequest, servers: None, appdata: AppData, pair: ClusterPair, tmp_path: Path
) -> Iterator[FeedWorld]:
    from tests.feeds.world import feed_world

    backend = str(getattr(request, "param", "redis"))
    stores = backend.removesuffix(THRIFT).removesuffix(TLS)
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
    with feed_world(stores, address, appdata, pair, tmp_path, tls=tls, **overrides) as w:
        yield w
