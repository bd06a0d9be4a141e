"""Fixtures of the backfill tests: app-data shard databases and HBase
tables of their own (a backfill walks every user of the store, so it must
not walk the feed tests' huge fan-outs), and ``world``: the feed tests'
world (Celery workers on PinLater, ``FeedActions``) whose workers also run
``tasks.backfill.tasks`` (and the typeahead's tasks) and consume the
``backfill`` queue.

The store is shared by the directory's tests (ids never repeat, so HBase
rows never collide); each test leaves every user's feed equal to the truth,
so the next one's verify starts from zero differences."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.appdata.settings import PREFIX_VAR
from tasks.appdata.store import AppData
from tasks.backfill.queue import QUEUE
from tasks.hbase import ClusterPair
from tests.backfill.helpers import data_fixtures
from tests.feeds.world import TASK_MODULES, FeedWorld, feed_world
from tests.support.appdata import ENV as APPDATA_ENV

TAG = uuid.uuid4().hex[:8]
ENV = {**APPDATA_ENV, PREFIX_VAR: f"appdata_bf{TAG}_", "PINLATER_HBASE_TABLE_PREFIX": f"bf{TAG}"}


store, pair = data_fixtures(ENV, "session")


@pytest.fixture
def world(store: AppData, pair: ClusterPair, tmp_path: Path) -> Iterator[FeedWorld]:
    with feed_world("redis", None, store, pair, tmp_path, imports=(*TASK_MODULES, "tasks.backfill.tasks"),
                    more_queues=(QUEUE,), extra_env=ENV) as w:
        yield w
