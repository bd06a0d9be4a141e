"""Writes with a timestamp per cell, the three delete kinds and versioned
reads, through the Thrift2 servers of the two real clusters."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import (
    ClusterPair,
    ClusterPool,
    delete_versions,
    get_versions,
    put_versions,
    read_columns,
)
from tasks.hbase.idl import THRIFT2
from tasks.hbase.reads import scan_range, scan_rows, scan_versions
from tasks.typeahead.tables import TYPEAHEAD_WIDE

FEED = FOLLOWING_FEED.name
WIDE = TYPEAHEAD_WIDE.name


def thrift1_versions(pool: ClusterPool, table: str, row: bytes, column: bytes) -> list[tuple[bytes, int]]:
    """Every visible version of one cell, read through Thrift1 (happybase)."""
    return pool.run("versions", lambda c: c.table(table).cells(row, column, versions=100, include_timestamp=True))


def versions(pool: ClusterPool, row: bytes, column: bytes, table: str = FEED) -> list[tuple[int, bytes]]:
    return get_versions(pool, table, [row], columns=[column]).get(row, {}).get(column, [])


def test_per_cell_timestamps_round_trip_on_both_clusters(pair: ClusterPair, row: bytes) -> None:
    other = row + b"-2"
    cells = [
        (row, b"feed:a", b"a1", 1_001),
        (row, b"feed:a", b"a2", 1_002),
        (row, b"feed:b", b"b7", 7_007),
        (other, b"feed:a", b"o5", 5_005),
    ]
    for pool in pair:
        assert put_versions(pool, FEED, cells) == 4
        assert thrift1_versions(pool, FEED, row, b"feed:a") == [(b"a2", 1_002), (b"a1", 1_001)]
        latest = pool.run("row", lambda c: c.table(FEED).row(row, include_timestamp=True))
        assert latest == {b"feed:a": (b"a2", 1_002), b"feed:b": (b"b7", 7_007)}
        assert thrift1_versions(pool, FEED, other, b"feed:a") == [(b"o5", 5_005)]


def test_a_batch_of_many_timestamps_lands_as_one_timestamp_at_a_time_does(pair: ClusterPair, row: bytes) -> None:
    """Puts at many distinct timestamps and deletes up to others, each sent
    as one batched call, leave the same cells and timestamps as the same
    writes sent through Thrift1 one timestamp per call (the old path)."""
    rng = random.Random(24)
    columns = [b"feed:%02d" % i for i in range(8)]
    puts = [(column, b"v%d" % ts, ts) for column in columns for ts in rng.sample(range(1, 400), 6)]
    deletes = [(column, ts) for column in columns[::2] for ts in rng.sample(range(1, 400), 2)]
    batched, one_by_one = row + b"-batched", row + b"-single"
    for pool in pair:
        assert put_versions(pool, FEED, [(batched, c, v, ts) for c, v, ts in puts]) == len(puts)
        assert delete_versions(pool, FEED, [(batched, c, ts, "upto") for c, ts in deletes]) == len(deletes)

        def old_path(connection: Any) -> None:
            table = connection.table(FEED)
            for column, value, ts in puts:
                table.put(one_by_one, {column: value}, timestamp=ts)
            for column, ts in deletes:
                table.delete(one_by_one, [column], timestamp=ts)

        pool.run("one timestamp a call", old_path)
        for column in columns:
            got = thrift1_versions(pool, FEED, batched, column)
            assert got == thrift1_versions(pool, FEED, one_by_one, column), (pool.name, column)
            masked_up_to = max([ts for c, ts in deletes if c == column], default=0)
            assert got == sorted(((v, ts) for c, v, ts in puts if c == column and ts > masked_up_to),
                                 key=lambda cell: -cell[1])


def test_version_delete_masks_exactly_that_version(pair: ClusterPair, row: bytes) -> None:
    """A column kept in two versions whose newer one is deleted exactly shows
    the older one; a later put at the deleted version stays masked, one at
    another version shows."""
    for pool in pair:
        put_versions(pool, FEED, [(row, b"feed:q", b"old", 100), (row, b"feed:q", b"new", 200)])
        assert delete_versions(pool, FEED, [(row, b"feed:q", 200, "version")]) == 1
        assert versions(pool, row, b"feed:q") == [(100, b"old")]
        assert read_columns(pool, FEED, row, family="feed", limit=10) == [(b"q", b"old")]  # Thrift1 too
        put_versions(pool, FEED, [(row, b"feed:q", b"again", 200)])  # late, at the deleted version
        assert versions(pool, row, b"feed:q") == [(100, b"old")]
        put_versions(pool, FEED, [(row, b"feed:q", b"later", 300), (row, b"feed:q", b"between", 150)])
        assert versions(pool, row, b"feed:q") == [(300, b"later"), (150, b"between"), (100, b"old")]


def test_upto_delete_masks_every_version_at_or_before(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    put_versions(pool, FEED, [(row, b"feed:q", b"%d" % t, t) for t in (100, 200, 300)] + [(row, b"feed:r", b"", 100)])
    assert delete_versions(pool, FEED, [(row, b"feed:q", 200, "upto")]) == 1
    assert versions(pool, row, b"feed:q") == [(300, b"300")]
    put_versions(pool, FEED, [(row, b"feed:q", b"late", 150), (row, b"feed:q", b"same", 200)])
    assert versions(pool, row, b"feed:q") == [(300, b"300")]
    put_versions(pool, FEED, [(row, b"feed:q", b"after", 250)])
    assert versions(pool, row, b"feed:q") == [(300, b"300"), (250, b"after")]
    assert versions(pool, row, b"feed:r") == [(100, b"")]  # other columns untouched


@pytest.mark.parametrize("family", [b"feed", b"feed:"])
def test_family_version_delete_masks_that_version_of_every_column(
    pair: ClusterPair, row: bytes, family: bytes
) -> None:
    pool = pair.standby
    cells = [(row, b"feed:" + q, q + b"@%d" % t, t) for q in (b"a", b"b", b"c") for t in (100, 200)]
    put_versions(pool, FEED, [*cells, (row, b"feed:d", b"d@300", 300)])
    assert delete_versions(pool, FEED, [(row, family, 200, "family_version")]) == 1
    assert get_versions(pool, FEED, [row]) == {
        row: {
            b"feed:a": [(100, b"a@100")],
            b"feed:b": [(100, b"b@100")],
            b"feed:c": [(100, b"c@100")],
            b"feed:d": [(300, b"d@300")],
        }
    }
    # Later puts at that version are masked, in a new column too; others show.
    put_versions(pool, FEED, [(row, b"feed:a", b"late", 200), (row, b"feed:e", b"new", 200)])
    put_versions(pool, FEED, [(row, b"feed:a", b"a@250", 250)])
    got = get_versions(pool, FEED, [row])[row]
    assert got[b"feed:a"] == [(250, b"a@250"), (100, b"a@100")]
    assert b"feed:e" not in got


def test_one_call_mixes_kinds_and_rows(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    other = row + b"-2"
    put_versions(pool, FEED, [(r, b"feed:" + q, b"", t) for r in (row, other) for q in (b"a", b"b") for t in (1, 2)])
    deletes = [(row, b"feed:a", 2, "version"), (row, b"feed:b", 2, "upto"), (other, b"feed", 1, "family_version")]
    assert delete_versions(pool, FEED, deletes) == 3
    assert get_versions(pool, FEED, [row, other]) == {
        row: {b"feed:a": [(1, b"")]},
        other: {b"feed:a": [(2, b"")], b"feed:b": [(2, b"")]},
    }


class CallLog:
    """Wraps a thriftpy2 client: records (method, number of mutations, rows)."""

    def __init__(self, client: Any, log: list[tuple[str, int, list[bytes]]]) -> None:
        self.client = client
        self.log = log

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(table: bytes, mutations: list[Any]) -> Any:
            self.log.append((method, len(mutations), [m.row for m in mutations]))
            return getattr(self.client, method)(table, mutations)

        return call


def decoded(method: str, body: bytes) -> Any:
    """A pre-encoded call's arguments, read back by thriftpy2."""
    args = getattr(THRIFT2.THBaseService, f"{method}_args")()
    TCyBinaryProtocol(TCyMemoryBuffer(body)).read_struct(args)
    return args


def logged_calls(pool: ClusterPool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, list[bytes]]]:
    """Records every Thrift2 call's (method, number of mutations, rows),
    whether made through the client or pre-encoded."""
    log: list[tuple[str, int, list[bytes]]] = []
    run, call_encoded = pool.thrift2.run, pool.thrift2.call_encoded

    def logged(operation: str, method: str, bodies: list[bytes]) -> None:
        for body in bodies:
            puts = decoded(method, body).tputs
            log.append((method, len(puts), [put.row for put in puts]))
        call_encoded(operation, method, bodies)

    monkeypatch.setattr(pool.thrift2, "run", lambda op, fn, **kw: run(op, lambda c: fn(CallLog(c, log)), **kw))
    monkeypatch.setattr(pool.thrift2, "call_encoded", logged)
    return log


def test_batches_larger_than_one_call(pair: ClusterPair, row: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = pair.primary
    rows = [row + b"-%02d" % i for i in range(30)]
    cells = [(r, b"feed:" + q, b"v", t) for r in reversed(rows) for q in (b"a", b"b") for t in (10, 20)]
    log = logged_calls(pool, monkeypatch)
    assert put_versions(pool, FEED, cells, batch_size=10) == 120
    # Whole rows (4 cells each) in key order, a call closed once it holds >= 10 cells.
    assert [(method, size) for method, size, _ in log] == [("putMultiple", 3)] * 10
    assert [r for _, _, call_rows in log for r in call_rows] == rows
    got = get_versions(pool, FEED, rows)
    assert all(got[r] == {b"feed:a": [(20, b"v"), (10, b"v")], b"feed:b": [(20, b"v"), (10, b"v")]} for r in rows)

    log.clear()
    deletes = [(r, b"feed:a", 20, "version") for r in rows] + [(r, b"feed:b", 20, "upto") for r in rows]
    assert delete_versions(pool, FEED, deletes, batch_size=7) == 60
    # One TDelete per row and kind: 4 rows (8 markers) a call, the last 2 rows alone.
    assert [(method, size) for method, size, _ in log] == [("deleteMultiple", 8)] * 7 + [("deleteMultiple", 4)]
    got = get_versions(pool, FEED, rows)
    assert all(got[r] == {b"feed:a": [(10, b"v")]} for r in rows)


def test_get_versions_every_version_newest_first(pair: ClusterPair, row: bytes) -> None:
    pool = pair.standby
    stamps = [5, 1, 4, 2, 3]
    put_versions(pool, WIDE, [(row, b"m:x", b"x%d" % t, t) for t in stamps] + [(row, b"m:y", b"y", 9)])
    # Family c keeps one version (TYPEAHEAD_WIDE): a read of all versions gets the newest only.
    put_versions(pool, WIDE, [(row, b"c:t", b"t1", 1), (row, b"c:t", b"t2", 2)])
    newest_first = [(t, b"x%d" % t) for t in (5, 4, 3, 2, 1)]
    assert get_versions(pool, WIDE, [row, row + b"-none"]) == {
        row: {b"c:t": [(2, b"t2")], b"m:x": newest_first, b"m:y": [(9, b"y")]}
    }
    assert get_versions(pool, WIDE, [row], columns=[b"m"]) == {row: {b"m:x": newest_first, b"m:y": [(9, b"y")]}}
    assert get_versions(pool, WIDE, [row], columns=[b"m:x"], max_versions=2) == {row: {b"m:x": newest_first[:2]}}
    assert get_versions(pool, WIDE, [row + b"-none"]) == {}
    assert get_versions(pool, WIDE, []) == {}


def test_get_versions_reads_each_rows_own_columns_in_bounded_calls(
    pair: ClusterPair, row: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = pair.primary
    rows = [row + b"-%02d" % i for i in range(6)]
    put_versions(pool, WIDE, [(r, b"m:" + q, r[-2:] + q, 7) for r in rows for q in (b"a", b"b", b"c")])
    wanted = {r: [b"m:" + b"abc"[i % 3 : i % 3 + 1]] for i, r in enumerate(rows[:4])}
    wanted[rows[4]] = [b"m:a", b"m:b", b"m:c"]
    log = logged_calls(pool, monkeypatch)
    got = get_versions(pool, WIDE, rows, columns=wanted, batch_size=4)
    # Only the columns each row asked for; a row the mapping leaves out reads everything.
    assert got == {
        **{r: {cs[0]: [(7, r[-2:] + cs[0][2:])]} for r, cs in list(wanted.items())[:4]},
        rows[4]: {b"m:" + q: [(7, rows[4][-2:] + q)] for q in (b"a", b"b", b"c")},
        rows[5]: {b"m:" + q: [(7, rows[5][-2:] + q)] for q in (b"a", b"b", b"c")},
    }
    # A call closes once it lists 4 columns (a row without any counts one).
    assert [rs for _, _, rs in log] == [rows[:4], rows[4:]]


def test_scan_versions_pages_a_range_and_reads_what_get_versions_does(pair: ClusterPair, row: bytes) -> None:
    """Every version of the asked columns of each row in [start, stop), over
    calls of ``page`` rows, each picking up after the last: the same as a
    get of those rows; rows without those columns are not in it."""
    pool = pair.primary
    keys = [row + b"-%02d" % i for i in range(7)]
    put_versions(pool, WIDE, [(k, b"m:x", b"%s@%d" % (k[-2:], t), t) for k in keys for t in (3, 1, 2)])
    put_versions(pool, WIDE, [(keys[3], b"m:y", b"y", 8), (keys[5], b"c:t", b"t", 4)])
    put_versions(pool, WIDE, [(row + b"-04x", b"c:t", b"t", 4)])  # in range, none of the columns
    every = get_versions(pool, WIDE, keys, columns=[b"m"])
    assert every[keys[0]] == {b"m:x": [(3, b"00@3"), (2, b"00@2"), (1, b"00@1")]}
    for page in (1, 2, 3, 7, 100):
        assert scan_versions(pool, WIDE, start=keys[0], stop=keys[-1] + b"\x00", columns=[b"m"], page=page) == every
    assert scan_versions(pool, WIDE, start=keys[2], stop=keys[4], columns=[b"m:y"], page=1) == {
        keys[3]: {b"m:y": [(8, b"y")]}}
    assert scan_versions(pool, WIDE, start=keys[0], stop=keys[2], columns=[b"m:x"], max_versions=1) == {
        k: {b"m:x": [(3, k[-2:] + b"@3")]} for k in keys[:2]}
    with pytest.raises(ValueError, match=r"page must be in 1\.\.100000"):
        scan_versions(pool, WIDE, start=keys[0], stop=keys[1], columns=[b"m"], page=0)
    with pytest.raises(ValueError, match="max_versions"):
        scan_versions(pool, WIDE, start=keys[0], stop=keys[1], columns=[b"m"], max_versions=0)


def test_scan_rows_reads_a_range_in_one_call_as_scan_range_does(pair: ClusterPair, row: bytes) -> None:
    """The Thrift2 scan the lookups use answers what the Thrift1 scan does:
    rows in [start, stop) in key order, newest version only, the columns and
    filter applied by HBase, at most ``limit`` rows."""
    keys = [row + b"-%02d" % i for i in range(12)]
    for pool in pair:
        for i, key in enumerate(keys):
            put_versions(pool, FEED, [(key, b"feed:a", b"old", 10), (key, b"feed:a", b"new%d" % i, 20),
                                      (key, b"feed:b%d" % (i % 2), b"x", 10)])
        start, stop = keys[2], keys[9]
        one = scan_rows(pool, FEED, start=start, stop=stop, limit=100)
        assert one == scan_range(pool, FEED, start=start, stop=stop)
        assert [k for k, _ in one] == keys[2:9]
        assert one[0][1] == {b"feed:a": b"new2", b"feed:b0": b"x"}
        assert [k for k, _ in scan_rows(pool, FEED, start=start, stop=stop, limit=3)] == keys[2:5]
        narrowed = scan_rows(pool, FEED, start=keys[0], stop=keys[-1] + b"\x00", limit=100, columns=[b"feed:a"],
                             scan_filter=b"SingleColumnValueFilter('feed', 'a', =, 'binary:new7', true, true)")
        assert narrowed == [(keys[7], {b"feed:a": b"new7"})]
        assert scan_rows(pool, FEED, start=row + b"-99", stop=row + b"-zz", limit=5) == []
        with pytest.raises(ValueError, match=r"limit must be in 1\.\.100000"):
            scan_rows(pool, FEED, start=start, stop=stop, limit=0)
