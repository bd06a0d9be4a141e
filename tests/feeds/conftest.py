"""Fixtures of the feed tests: the app-data store (4 shards on the test
MariaDB, per-session databases) and the HBase pair (both real clusters,
per-session tables), the very fixtures of tests/appdata and tests/hbase;
``world`` adds Celery workers running the feed tasks on PinLater
(``tests.feeds.world``), over the store setup of its ``backend`` parameter
("redis", "mysql", or "redis+thrift" through a ``pinlater server``);
``@pytest.mark.feed_settings(page_size=100, ...)`` sets its workers'
``PINLATER_FEED_*``.
Helpers are in ``tests.feeds.helpers``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair
from tests.appdata.conftest import appdata  # noqa: F401  (a fixture, used by name)
from tests.feeds.world import FeedWorld, feed_world
from tests.hbase.conftest import pair  # noqa: F401  (a fixture, used by name)
from tests.workers.conftest import thrift_server  # noqa: F401  (a fixture, used by name)

THRIFT = "+thrift"


@pytest.fixture
def world(
    request: pytest.FixtureRequest, servers: None, appdata: AppData, pair: ClusterPair, tmp_path: Path  # noqa: F811
) -> Iterator[FeedWorld]:
    backend = str(getattr(request, "param", "redis"))
    stores = backend.removesuffix(THRIFT)
    address = None
    if backend.endswith(THRIFT):
        server: Callable[[str], str] = request.getfixturevalue("thrift_server")
        address = server(stores)
    marker = request.node.get_closest_marker("feed_settings")
    overrides = dict(marker.kwargs) if marker else {}
    with feed_world(stores, address, appdata, pair, tmp_path, **overrides) as w:
        yield w
