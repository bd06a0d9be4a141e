"""The feed world (a pytest plugin): Celery workers running the feed tasks
(and the typeahead's) on PinLater, over the app-data store and the HBase
pair (``tests.feeds.world``), over the store setup of the ``backend``
parameter ("redis", "mysql", or "redis+thrift" through a ``pinlater
server``); ``@pytest.mark.feed_settings(page_size=100, ...)`` sets its
workers' ``PINLATER_FEED_*``. Used by the feed and typeahead tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tasks.appdata.store import AppData
    from tasks.hbase import ClusterPair
    from tests.feeds.world import FeedWorld

THRIFT = "+thrift"


@pytest.fixture
def world(
    request: pytest.FixtureRequest, servers: None, appdata: AppData, pair: ClusterPair, tmp_path: Path
) -> Iterator[FeedWorld]:
    from tests.feeds.world import feed_world

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
