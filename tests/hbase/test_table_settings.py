"""Table settings (encoding, block size, bloom filter, versions) as defined,
read back from both real clusters; drift shown, applied, and data kept."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import (
    ALL_VERSIONS,
    ClusterPair,
    Family,
    TableDef,
    drop_table,
    ensure_table,
    get_versions,
    put_versions,
)
from tasks.hbase import cli as hbase_cli
from tasks.hbase.idl import THRIFT2
from tasks.hbase.tables import (
    FEED_TRIM_OBSERVER,
    TRIM_CAP_ATTRIBUTE,
    Drift,
    apply_table,
    compaction_cap,
    installed_tables,
    table_drift,
)
from tasks.typeahead.tables import TYPEAHEAD_TALL, TYPEAHEAD_WIDE
from tests.support.hbase import test_settings

# Every installed app's tables, as `pinlater-hbase tables` checks them.
TABLES = installed_tables()


def descriptor(pool: Any, table: str) -> dict[str, Any]:
    name = pool.table_name(table)
    found = pool.thrift2.run("describe", lambda c: c.getTableDescriptor(THRIFT2.TTableName(ns=b"default",
                                                                                           qualifier=name.encode())))
    return {d.name.decode(): d for d in found.columns}


def test_every_table_reads_back_as_defined_on_both_clusters(pair: ClusterPair) -> None:
    for pool in pair:
        for table in TABLES:
            assert table_drift(pool, table) == []
            found = descriptor(pool, table.name)
            assert sorted(found) == sorted(f.name for f in table.families)
            for family in table.families:
                raw = found[family.name]
                assert raw.attributes[b"DATA_BLOCK_ENCODING"] == family.data_block_encoding.encode()
                assert raw.attributes[b"BLOCKSIZE"] == str(family.block_size).encode()
                assert raw.attributes[b"BLOOMFILTER"] == family.bloom_filter_type.encode()
                assert raw.attributes[b"VERSIONS"] == str(family.max_versions).encode()
                prefetch = raw.attributes[b"PREFETCH_BLOCKS_ON_OPEN"]
                assert prefetch == str(family.prefetch_blocks_on_open).lower().encode()
    # The feed paper's settings in particular: FAST_DIFF keys, 16 KB blocks.
    feed = FOLLOWING_FEED.family("feed")
    assert (feed.data_block_encoding, feed.block_size, feed.bloom_filter_type) == ("FAST_DIFF", 16384, "ROW")
    assert TYPEAHEAD_WIDE.family("c").block_size == 16384 and TYPEAHEAD_TALL.family("c").block_size == 65536
    # What lookups read is cached as soon as a compaction writes it.
    assert TYPEAHEAD_WIDE.family("c").prefetch_blocks_on_open and TYPEAHEAD_TALL.family("c").prefetch_blocks_on_open
    assert not TYPEAHEAD_WIDE.family("m").prefetch_blocks_on_open


def _old_feed(pool: Any) -> None:
    """following_feed as happybase (Thrift1) made it before: one version,
    no encoding, 64 KB blocks, a ROWCOL bloom filter, in memory, no block
    cache."""
    pool.run("create old", lambda c: c.create_table(
        FOLLOWING_FEED.name, {"feed": {"max_versions": 1, "bloom_filter_type": "ROWCOL", "in_memory": True}}))


def test_apply_alters_an_old_table_online_and_keeps_its_data() -> None:
    pair = ClusterPair.from_settings(test_settings(table_prefix=f"t{uuid.uuid4().hex[:8]}old"))
    try:
        for pool in pair:
            _old_feed(pool)
            row = b"user-1"
            cells = [(row, b"feed:%04d" % i, b"", 1_000 + i) for i in range(50)]
            put_versions(pool, FOLLOWING_FEED.name, cells)
            drift = table_drift(pool, FOLLOWING_FEED)
            assert {d.setting: (d.found, d.wanted) for d in drift} == {
                "max_versions": (1, 2147483647),
                "data_block_encoding": ("NONE", "FAST_DIFF"),
                "block_size": (65536, 16384),
                "bloom_filter_type": ("ROWCOL", "ROW"),
                "in_memory": (True, False),
                "block_cache_enabled": (False, True),  # happybase's default
                # The compaction-time trimming: the coprocessor and its cap.
                "coprocessor": ("none", FEED_TRIM_OBSERVER),
                TRIM_CAP_ATTRIBUTE: ("unset", "1000"),
            }
            assert str(drift[0]) == f"{pool.name} following_feed: coprocessor is none, defined {FEED_TRIM_OBSERVER}"
            assert str(drift[2]).startswith(f"{pool.name} following_feed family 'feed': ")
            assert compaction_cap(pool, FOLLOWING_FEED) is None
            assert apply_table(pool, FOLLOWING_FEED) == drift
            assert table_drift(pool, FOLLOWING_FEED) == []
            assert compaction_cap(pool, FOLLOWING_FEED) == 1000
            raw = descriptor(pool, FOLLOWING_FEED.name)["feed"]
            assert (raw.compressionType, raw.timeToLive) == (2, 2147483647)  # untouched: NONE, forever
            got = get_versions(pool, FOLLOWING_FEED.name, [row])
            assert got == {row: {c: [(ts, b"")] for _r, c, _v, ts in cells}}
            assert apply_table(pool, FOLLOWING_FEED) == []  # idempotent
    finally:
        for pool in pair:
            drop_table(pool, FOLLOWING_FEED.name)
        pair.close()


def test_a_worker_works_on_a_table_with_tuning_drift_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    pair = ClusterPair.from_settings(test_settings(table_prefix=f"t{uuid.uuid4().hex[:8]}tune"))
    pool = pair.primary
    odd = TableDef("tuned", (Family("f", data_block_encoding="NONE", block_size=8192),))
    try:
        assert ensure_table(pool, odd) is True
        wanted = TableDef("tuned", (Family("f"),))
        with caplog.at_level(logging.WARNING, logger="tasks.hbase.tables"):
            assert ensure_table(pool, wanted) is False
            assert ensure_table(pool, wanted) is False
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1  # once per process and table
        assert "data_block_encoding is NONE, defined FAST_DIFF" in warnings[0]
        assert "pinlater-hbase tables --apply" in warnings[0]
        assert apply_table(pool, wanted)[0] == Drift("primary", "tuned", "f", "data_block_encoding", "NONE",
                                                     "FAST_DIFF")
        assert table_drift(pool, wanted) == []
    finally:
        drop_table(pool, "tuned")
        pair.close()


def test_apply_adds_a_missing_family(row: bytes) -> None:
    pair = ClusterPair.from_settings(test_settings(table_prefix=f"t{uuid.uuid4().hex[:8]}fam"))
    pool = pair.primary
    try:
        ensure_table(pool, TableDef("two", (Family("a"),)))
        put_versions(pool, "two", [(row, b"a:x", b"kept", 5)])
        wanted = TableDef("two", (Family("a"), Family("b", max_versions=3)))
        assert [str(d) for d in table_drift(pool, wanted)] == ["primary two family 'b': missing"]
        apply_table(pool, wanted)
        assert table_drift(pool, wanted) == []
        assert get_versions(pool, "two", [row]) == {row: {b"a:x": [(5, b"kept")]}}
    finally:
        drop_table(pool, "two")
        pair.close()


def test_prefetch_on_open_is_tuning_that_apply_turns_on_and_off_keeping_data(row: bytes) -> None:
    pair = ClusterPair.from_settings(test_settings(table_prefix=f"t{uuid.uuid4().hex[:8]}pre"))
    pool = pair.primary
    plain = TableDef("pre", (Family("c", max_versions=ALL_VERSIONS),))
    prefetched = TableDef("pre", (Family("c", max_versions=ALL_VERSIONS, prefetch_blocks_on_open=True),))
    try:
        ensure_table(pool, plain)
        put_versions(pool, "pre", [(row, b"c:x", b"old", 5), (row, b"c:x", b"new", 6)])
        drift = table_drift(pool, prefetched)
        assert drift == [Drift("primary", "pre", "c", "prefetch_blocks_on_open", False, True)] and drift[0].tuning
        assert ensure_table(pool, prefetched) is False  # a worker works on: tuning only
        apply_table(pool, prefetched)
        assert table_drift(pool, prefetched) == []
        assert descriptor(pool, "pre")["c"].attributes[b"PREFETCH_BLOCKS_ON_OPEN"] == b"true"
        apply_table(pool, plain)
        assert table_drift(pool, plain) == [] and table_drift(pool, prefetched) != []
        assert get_versions(pool, "pre", [row]) == {row: {b"c:x": [(6, b"new"), (5, b"old")]}}
    finally:
        drop_table(pool, "pre")
        pair.close()


def _cli_env(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    settings = test_settings(table_prefix=prefix)
    monkeypatch.setenv("PINLATER_HBASE_PRIMARY", str(settings.primary))
    monkeypatch.setenv("PINLATER_HBASE_STANDBY", str(settings.standby))
    monkeypatch.setenv("PINLATER_HBASE_PRIMARY_THRIFT2", str(settings.primary_thrift2))
    monkeypatch.setenv("PINLATER_HBASE_STANDBY_THRIFT2", str(settings.standby_thrift2))
    monkeypatch.setenv("PINLATER_HBASE_TABLE_PREFIX", prefix)
    monkeypatch.setenv("PINLATER_HBASE_CALL_TIMEOUT_S", "20")


def test_the_tables_command_shows_before_it_applies(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}cli"
    _cli_env(monkeypatch, prefix)
    pair = ClusterPair.from_settings(test_settings(table_prefix=prefix))
    try:
        _old_feed(pair.standby)
        assert hbase_cli.main(["tables"]) == hbase_cli.DRIFT
        shown = capsys.readouterr().out.splitlines()
        assert "drift: primary following_feed: table missing" in shown
        assert "drift: standby following_feed family 'feed': data_block_encoding is NONE, defined FAST_DIFF" in shown
        assert table_drift(pair.primary, FOLLOWING_FEED)[0].found == "missing"  # shown, nothing written
        assert hbase_cli.main(["tables", "--apply"]) == 0
        applied = capsys.readouterr().out
        assert "altered: standby following_feed family 'feed': block_size is 65536, defined 16384" in applied
        assert hbase_cli.main(["tables"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            line for p in ("primary", "standby")
            for line in [*(f"ok: {p} {t.name}" for t in TABLES),
                         f"trimming: {p} following_feed by compaction, cap 1000"]
        ]
    finally:
        for pool in pair:
            for table in TABLES:
                drop_table(pool, table.name)
        pair.close()


def test_the_tables_command_refuses_in_one_line_when_a_cluster_is_down(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cli_env(monkeypatch, "unused")
    monkeypatch.setenv("PINLATER_HBASE_PRIMARY_THRIFT2", "127.0.0.1:9")  # nothing listens on discard
    monkeypatch.setenv("PINLATER_HBASE_CALL_TIMEOUT_S", "2")
    assert hbase_cli.main(["tables"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: hbase primary (127.0.0.1:9): describe table following_feed")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"data_block_encoding": "ZIP"}, "data_block_encoding must be one of"),
    ({"block_size": 512}, "block_size must be 1024..16777216 bytes, got 512"),
    ({"block_size": True}, "block_size must be"),
    ({"bloom_filter_type": "row"}, "bloom_filter_type must be one of"),
    ({"max_versions": 0}, "max_versions must be 1..2147483647"),
])
def test_a_family_refuses_settings_hbase_would_not_take(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Family("f", **kwargs)


def test_happybase_still_reads_what_thrift2_created(pair: ClusterPair) -> None:
    families = pair.primary.run("families", lambda c: c.table(FOLLOWING_FEED.name).families())
    assert families[b"feed"]["max_versions"] == 2147483647
