"""Feed reads on the real servers: newest first with a cursor, joined to
pin objects; the standby answers when the primary is slow or down."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tasks.appdata.store import AppData
from tasks.feeds.read import FeedReader, FeedUnavailable
from tasks.hbase import ClusterPair, ClusterPool
from tasks.hbase.settings import Address
from tests.feeds.helpers import feed_of, silent_port, user
from tests.servers import services

MARGIN_S = 1.5


@pytest.fixture
def black_hole() -> Iterator[Address]:
    with silent_port() as address:
        yield address


def test_read_pages_newest_first_joined_to_pins(appdata: AppData, pair: ClusterPair) -> None:
    follower, newest_first = feed_of(appdata, pair, 5)
    reader = FeedReader(pair, appdata, cutoff_s=2.0, shadow_share=1.0)
    try:
        seen: list[int] = []
        cursor: str | None = None
        for _ in range(3):
            page = reader.read(follower, cursor, limit=2)
            assert page.served_by == "primary"
            assert all(p.data["board_id"] and p.type.name == "PIN" for p in page.pins)
            seen.extend(p.id for p in page.pins)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == newest_first and cursor is None
        assert reader.read(user(appdata, "nobody follows"), None, 10).pins == []
    finally:
        reader.close()


def test_slow_primary_is_beaten_by_the_standby_after_the_cutoff(
    appdata: AppData, pair: ClusterPair, black_hole: Address
) -> None:
    follower, newest_first = feed_of(appdata, pair, 2)
    slow = ClusterPool("primary", black_hole, call_timeout_s=3.0, attempts=1, table_prefix=pair.primary.table_prefix,
                       thrift2_address=black_hole)
    reader = FeedReader(ClusterPair(slow, pair.standby), appdata, cutoff_s=0.3)
    try:
        started = time.monotonic()
        page = reader.read(follower, None, 10)
        elapsed = time.monotonic() - started
        assert page.served_by == "standby" and [p.id for p in page.pins] == newest_first
        assert 0.3 <= elapsed < 0.3 + MARGIN_S
    finally:
        reader.close()
        slow.close()


def test_both_clusters_down_is_a_clear_error(appdata: AppData) -> None:
    nowhere = Address("127.0.0.1", 19099)  # nothing listens there
    dead = ClusterPair(ClusterPool("primary", nowhere, attempts=1, thrift2_address=nowhere),
                       ClusterPool("standby", nowhere, attempts=1, thrift2_address=nowhere))
    reader = FeedReader(dead, appdata, cutoff_s=0.2)
    try:
        with pytest.raises(FeedUnavailable, match=r"hbase primary .*hbase standby|hbase standby .*hbase primary"):
            reader.read(user(appdata, "u"), None, 10)
    finally:
        reader.close()


@pytest.mark.slow
@pytest.mark.serial_hbase  # stops the primary cluster other tests use
def test_read_with_the_primary_stopped_is_served_by_the_standby(appdata: AppData, pair: ClusterPair) -> None:
    follower, newest_first = feed_of(appdata, pair, 3)
    cutoff = 0.5
    reader = FeedReader(pair, appdata, cutoff_s=cutoff, shadow_share=0.5)
    services("stop-hbase", "primary")
    try:
        started = time.monotonic()
        page = reader.read(follower, None, 10)
        elapsed = time.monotonic() - started
        assert page.served_by == "standby"
        assert [p.id for p in page.pins] == newest_first
        assert elapsed < cutoff + MARGIN_S
    finally:
        reader.close()
        services("start-hbase", "primary")
    # Back: the primary serves again.
    reader = FeedReader(pair, appdata, cutoff_s=5.0)
    try:
        assert reader.read(follower, None, 10).served_by == "primary"
    finally:
        reader.close()
