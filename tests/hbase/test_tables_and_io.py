"""Writes, reads and table definitions against the two real clusters."""

from __future__ import annotations

import pytest

from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import (
    ALL_VERSIONS,
    ClusterPair,
    ClusterPool,
    Family,
    HBaseSchemaMismatch,
    TableDef,
    delete_cells,
    drop_table,
    ensure_table,
    ensure_tables,
    get_versions,
    put_cells,
    put_versions,
    read_columns,
)
from tasks.hbase.settings import Address
from tasks.hbase.tables import installed_tables
from tests.servers import ensure_services
from tests.support.hbase import PREFIX, test_settings
from tests.support.topology.relay import Relay

FEED = FOLLOWING_FEED.name


def qualifier(i: int) -> bytes:
    return b"feed:%08d" % i


def test_round_trip_on_both_clusters(pair: ClusterPair, row: bytes) -> None:
    for pool in pair:
        cells = {qualifier(i): pool.name.encode() for i in range(5)}
        assert put_cells(pool, FEED, {row: cells}, timestamp=1_000) == 5
    for pool in pair:
        got = read_columns(pool, FEED, row, family="feed", limit=100)
        assert got == [(b"%08d" % i, pool.name.encode()) for i in range(5)]


def test_following_feed_family_settings(pair: ClusterPair) -> None:
    for pool in pair:
        families = pool.run("families", lambda c: c.table(FEED).families())
        feed = families[b"feed"]
        assert feed["max_versions"] == ALL_VERSIONS == 2147483647
        assert feed["block_cache_enabled"] is True
    # Ensuring again creates nothing and finds the schema as defined.
    assert ensure_tables(pair, installed_tables()) == {"primary": [], "standby": []}


def test_ensure_table_refuses_a_table_with_other_families(pair: ClusterPair) -> None:
    pool = pair.primary
    assert ensure_table(pool, TableDef("odd", (Family("a", max_versions=3),))) is True
    try:
        with pytest.raises(HBaseSchemaMismatch, match=r"hbase primary .*family 'a' keeps 3 versions, not 1"):
            ensure_table(pool, TableDef("odd", (Family("a", max_versions=1),)))
        with pytest.raises(HBaseSchemaMismatch, match=r"family 'b' missing"):
            ensure_table(pool, TableDef("odd", (Family("a", max_versions=3), Family("b"))))
    finally:
        assert drop_table(pool, "odd") is True


def test_ensure_table_alters_a_table_made_with_the_old_settings(row: bytes) -> None:
    """following_feed as it was made before its family kept every version:
    ensuring it now alters the family, its other settings and data as they
    were."""
    pool = ClusterPair.from_settings(test_settings(table_prefix=f"{PREFIX}old")).primary
    old = TableDef(FEED, (Family("feed", max_versions=1, bloom_filter_type="ROWCOL", in_memory=True),))
    assert ensure_table(pool, old) is True
    try:
        put_cells(pool, FEED, {row: {qualifier(1): b"kept"}}, timestamp=10)
        assert ensure_table(pool, FOLLOWING_FEED) is False  # altered, not created
        families = pool.run("families", lambda c: c.table(FEED).families())
        feed = families[b"feed"]
        assert feed["max_versions"] == ALL_VERSIONS
        assert (feed["bloom_filter_type"], feed["in_memory"], feed["block_cache_enabled"]) == (b"ROWCOL", True, True)
        assert (feed["compression"], feed["time_to_live"]) == (b"NONE", 2147483647)
        assert read_columns(pool, FEED, row, family="feed", limit=10) == [(b"00000001", b"kept")]
        put_versions(pool, FEED, [(row, qualifier(1), b"newer", 20)])
        assert get_versions(pool, FEED, [row]) == {row: {qualifier(1): [(20, b"newer"), (10, b"kept")]}}
        assert ensure_table(pool, FOLLOWING_FEED) is False  # nothing left to alter
        # Fewer versions than a table keeps is still a mismatch, not an alter.
        with pytest.raises(HBaseSchemaMismatch, match=r"family 'feed' keeps 2147483647 versions, not 1"):
            ensure_table(pool, old)
    finally:
        drop_table(pool, FEED)
        pool.close()


def test_a_create_whose_reply_is_lost_is_sent_again_and_finds_its_table() -> None:
    """A create can outlast the call's timeout and still finish on the
    server (it waits for every region to open): sent again, it meets the
    table, and ensuring goes on with the table as made."""
    ensure_services()
    settings = test_settings(table_prefix=f"{PREFIX}lost", call_timeout_s=2.0, attempts=2)
    table = TableDef("lost", (Family("a", max_versions=1),))
    target = settings.primary_thrift2
    with Relay((target.host, target.port)) as relay:
        relay.lose_reply_to(b"createTable")
        pool = ClusterPool.for_cluster("primary", settings.primary, settings, Address(*relay.address))
        try:
            assert ensure_table(pool, table) is False  # made by the call whose reply was lost
            assert relay.marked == 2
            assert pool.run("families", lambda c: c.table("lost").families())[b"a"]["max_versions"] == 1
            assert ensure_table(pool, table) is False
        finally:
            drop_table(pool, "lost")
            pool.close()


def test_delete_at_t_masks_late_older_puts_and_not_newer(pair: ClusterPair, row: bytes) -> None:
    """Out-of-order follow/unfollow (docs/feeds.md): the unfollow's delete at T
    wins over the follow's put at T-1 even when the put is processed later;
    a re-follow at T+1 shows."""
    column = qualifier(7)
    for pool in pair:
        put_cells(pool, FEED, {row: {column: b""}}, timestamp=1_000)
        delete_cells(pool, FEED, {row: [column]}, timestamp=2_000)
        assert read_columns(pool, FEED, row, family="feed", limit=10) == []
        put_cells(pool, FEED, {row: {column: b"late"}}, timestamp=1_999)  # the late follow
        assert read_columns(pool, FEED, row, family="feed", limit=10) == []
        put_cells(pool, FEED, {row: {column: b"same"}}, timestamp=2_000)  # <= T is masked too
        assert read_columns(pool, FEED, row, family="feed", limit=10) == []
        put_cells(pool, FEED, {row: {column: b"again"}}, timestamp=2_001)  # the re-follow
        assert read_columns(pool, FEED, row, family="feed", limit=10) == [(b"00000007", b"again")]


def test_delete_masks_only_its_columns(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    put_cells(pool, FEED, {row: {qualifier(i): b"" for i in range(4)}}, timestamp=5_000)
    assert delete_cells(pool, FEED, {row: [qualifier(1), qualifier(2)]}, timestamp=5_000) == 2
    got = read_columns(pool, FEED, row, family="feed", limit=10)
    assert [q for q, _ in got] == [b"00000000", b"00000003"]


def test_reads_as_of_a_timestamp_are_exclusive(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    put_cells(pool, FEED, {row: {qualifier(1): b""}}, timestamp=100)
    put_cells(pool, FEED, {row: {qualifier(2): b""}}, timestamp=200)
    assert read_columns(pool, FEED, row, family="feed", limit=10, before_timestamp=200) == [(b"00000001", b"")]
    assert len(read_columns(pool, FEED, row, family="feed", limit=10, before_timestamp=201)) == 2


def test_paging_by_offset_and_by_cursor(pair: ClusterPair, row: bytes) -> None:
    pool = pair.standby
    # More cells than one batch, to cross mutateRows calls.
    put_cells(pool, FEED, {row: {qualifier(i): b"%d" % i for i in range(25)}}, timestamp=9_000, batch_size=10)
    pages = [read_columns(pool, FEED, row, family="feed", limit=10, offset=o) for o in (0, 10, 20, 30)]
    assert [len(p) for p in pages] == [10, 10, 5, 0]
    assert [q for p in pages for q, _ in p] == [b"%08d" % i for i in range(25)]
    # By cursor: the qualifiers after the previous page's last one.
    seen: list[bytes] = []
    after = None
    while True:
        page = read_columns(pool, FEED, row, family="feed", limit=7, after=after)
        if not page:
            break
        seen.extend(q for q, _ in page)
        after = page[-1][0]
    assert seen == [b"%08d" % i for i in range(25)]


def test_paging_cursor_with_quotes_and_binary_qualifiers(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    qualifiers = [b"a'b", b"a'c", b"\x00\x01", b"\xff\xfe'", b"z"]
    put_cells(pool, FEED, {row: {b"feed:" + q: b"" for q in qualifiers}}, timestamp=1)
    first = read_columns(pool, FEED, row, family="feed", limit=2)
    rest = read_columns(pool, FEED, row, family="feed", limit=10, after=first[-1][0])
    assert [q for q, _ in first + rest] == sorted(qualifiers)


def test_pages_count_each_live_column_once_whatever_its_versions_and_deletes(pair: ClusterPair, row: bytes) -> None:
    """A page's limit and offset count columns as a read sees them: a column
    with several versions once, a deleted one not at all, one newer than an
    as-of read not at all; by offset and by cursor alike."""
    pool = pair.primary
    put_cells(pool, FEED, {row: {qualifier(i): b"old" for i in range(30)}}, timestamp=1_000)
    put_cells(pool, FEED, {row: {qualifier(i): b"new" for i in range(0, 30, 3)}}, timestamp=2_000)
    delete_cells(pool, FEED, {row: [qualifier(i) for i in range(1, 30, 4)]}, timestamp=3_000)
    put_cells(pool, FEED, {row: {qualifier(i): b"late" for i in range(2, 30, 5)}}, timestamp=4_000)
    for as_of in (None, 4_000):
        whole = read_columns(pool, FEED, row, family="feed", limit=100, before_timestamp=as_of)
        live = [i for i in range(30) if i % 4 != 1 or (as_of is None and i % 5 == 2)]
        assert [q for q, _ in whole] == [b"%08d" % i for i in live]
        for limit in (1, 4, 7):
            by_offset = [read_columns(pool, FEED, row, family="feed", limit=limit, offset=o, before_timestamp=as_of)
                         for o in range(0, len(whole) + limit, limit)]
            assert [c for p in by_offset for c in p] == whole
            assert [len(p) for p in by_offset[:-2]] == [limit] * (len(by_offset) - 2)
            assert 0 < len(by_offset[-2]) <= limit and by_offset[-1] == []
            seen: list[tuple[bytes, bytes]] = []
            after = None
            while page := read_columns(pool, FEED, row, family="feed", limit=limit, after=after,
                                       before_timestamp=as_of):
                seen.extend(page)
                after = page[-1][0]
            assert seen == whole
