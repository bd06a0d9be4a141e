"""Cluster outages: the project's errors, fast, with the other cluster
unaffected; and the service script's HBase commands."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import (
    ClusterPair,
    ClusterPool,
    HBaseError,
    HBaseRequestFailed,
    HBaseUnavailable,
    put_cells,
    read_columns,
)
from tasks.hbase.settings import Address
from tests.servers import REPO, services
from tests.support.hbase import test_settings

# Stops an HBase cluster other tests use.
pytestmark = pytest.mark.serial_hbase

FEED = FOLLOWING_FEED.name
VAR = Path(os.environ.get("PINLATER_VAR", REPO / ".var"))


def hbase_pids() -> dict[str, str]:
    return {
        f"{cluster}/{jvm}": (VAR / "hbase" / cluster / f"{jvm}.pid").read_text().strip()
        for cluster in ("primary", "standby")
        for jvm in ("master", "thrift", "thrift2")
    }


def test_unreachable_cluster_is_a_clear_error_at_once() -> None:
    nowhere = Address("127.0.0.1", 19099)  # nothing listens there
    pool = ClusterPool("nowhere", nowhere, attempts=2, thrift2_address=nowhere)
    for call, operation in (
        (lambda: put_cells(pool, FEED, {b"r": {b"feed:q": b""}}, timestamp=1), "put cells into following_feed"),
        (lambda: read_columns(pool, FEED, b"r", family="feed", limit=1), "read following_feed row"),
    ):
        started = time.monotonic()
        with pytest.raises(HBaseUnavailable) as caught:
            call()
        assert time.monotonic() - started < 2
        message = str(caught.value)
        assert message.startswith(f"hbase nowhere (127.0.0.1:19099): {operation}: ")
        assert "Could not connect" in message and "\n" not in message


def test_server_side_errors_are_one_line(pair: ClusterPair, row: bytes) -> None:
    with pytest.raises(HBaseRequestFailed) as caught:
        read_columns(pair.primary, "no_such_table", row, family="feed", limit=1)
    message = str(caught.value)
    # Reads of a row go through Thrift2, whose TIOError for a missing table is just its name.
    assert message.endswith(f"TIOError: {pair.primary.table_name('no_such_table')}") and "\n" not in message
    # The operation names the table, not the row (a row key may hold what a user typed).
    assert message.startswith("hbase primary (127.0.0.1:19092): read no_such_table row: ")
    assert repr(row)[2:-1] not in message


@pytest.mark.slow
def test_standby_outage_fails_fast_and_primary_keeps_working(pair: ClusterPair, row: bytes) -> None:
    put_cells(pair.standby, FEED, {row: {b"feed:before": b""}}, timestamp=10)
    services("stop-hbase", "standby")
    try:
        for _ in range(3):  # pooled connections were open: each is replaced, none hangs
            started = time.monotonic()
            with pytest.raises(HBaseUnavailable, match=r"^hbase standby \(127\.0\.0\.1:19093\): "):
                put_cells(pair.standby, FEED, {row: {b"feed:during": b""}}, timestamp=20)
            assert time.monotonic() - started < 2
            with pytest.raises(HBaseError, match=r"^hbase standby \(127\.0\.0\.1:19093\): read following_feed"):
                read_columns(pair.standby, FEED, row, family="feed", limit=10)
        put_cells(pair.primary, FEED, {row: {b"feed:during": b""}}, timestamp=20)
        assert read_columns(pair.primary, FEED, row, family="feed", limit=10) == [(b"during", b"")]
    finally:
        services("start-hbase", "standby")
    # Back: the same pool works again, and what was written before the clean stop is there.
    put_cells(pair.standby, FEED, {row: {b"feed:after": b""}}, timestamp=30)
    assert [q for q, _ in read_columns(pair.standby, FEED, row, family="feed", limit=10)] == [b"after", b"before"]


def test_services_up_twice_is_a_no_op(pair: ClusterPair) -> None:
    before = hbase_pids()
    result = services("up")
    assert "hbase: primary: already running" in result.stdout
    assert "hbase: standby: already running" in result.stdout
    assert "starting" not in result.stdout
    assert hbase_pids() == before


@pytest.mark.slow
def test_a_restarted_thrift2_server_costs_a_pool_one_failed_call_not_one_per_idle_connection(
    pair: ClusterPair, row: bytes
) -> None:
    """A pool's idle Thrift2 connections all die with their server: the
    first call after a restart may fail on one of them, and its retry then
    opens a fresh connection instead of taking the next dead one."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    own = ClusterPair.from_settings(test_settings(attempts=2))  # pair's tables, a pool of its own
    pool = own.standby
    try:
        put_cells(pool, FEED, {row: {b"feed:x": b""}}, timestamp=10)
        with ThreadPoolExecutor(4) as threads:  # four connections, all idle afterwards
            list(threads.map(lambda _i: read_columns(pool, FEED, row, family="feed", limit=1), range(8)))
        assert len(pool.thrift2._idle) >= 2
        os.kill(int(hbase_pids()["standby/thrift2"]), signal.SIGKILL)
        services("up")  # a new Thrift2 server beside the running master
        assert read_columns(pool, FEED, row, family="feed", limit=1) == [(b"x", b"")]
    finally:
        own.close()
