"""The feed's compaction-time trimming (the ``FeedTrimObserver`` region
coprocessor) on both real clusters: rows capped to their newest pins by
major compactions with no delete marker written, unfollows and re-follows
across files and compactions equal to the consistency oracle, the cap
changed by table attribute, the coprocessor's counts in JMX, and a cluster
without it reported, trimmed by the sweep, and given no trim work where
compactions trim. The coprocessor's own unit tests are Java
(``scripts/hbase coprocessor test``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tasks.feeds.cells import TABLE, parse_qualifier, row_key
from tasks.feeds.follow import FollowAction, follow_writes
from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.feeds.writes import WriteBody
from tasks.hbase import ClusterPair, HBaseError, cli
from tasks.hbase.jmx import TrimCounts, trim_counts
from tasks.hbase.tables import (
    FEED_TRIM_OBSERVER,
    apply_table,
    compaction_cap,
    detach_coprocessor,
    ensure_table,
    table_drift,
)
from tests.consistency.oracle import feed_differences
from tests.feeds.helpers import apply_all, feed, feeds, followed_pinner, pin, tick, trimming, user
from tests.feeds.world import FeedWorld
from tests.servers import hbase_compact, hbase_raw
from tests.support.hbase import tables_pair

# Compactions take tens of seconds a test: started early, so no process is
# left with one at the end.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own() -> Iterator[ClusterPair]:
    """Both clusters with tables of their own: these tests compact the feed
    table whole, with caps far below other tests' feeds."""
    with tables_pair(f"t{uuid.uuid4().hex[:8]}cp") as made:
        yield made


def set_cap(pair: ClusterPair, cap: int) -> None:
    for pool in pair:
        apply_table(pool, feed_table(cap))
        assert compaction_cap(pool, FOLLOWING_FEED) == cap


def compact(pair: ClusterPair, *, flush_only: bool = False) -> None:
    """Both clusters at once (each call starts a JVM)."""
    with ThreadPoolExecutor(2) as both:
        list(both.map(lambda pool: hbase_compact(pool.name, pool.table_name(TABLE), flush_only=flush_only), pair))


def raw(pair: ClusterPair, cluster: str, reader: int) -> list[tuple[str, bytes, int]]:
    pool = pair[cluster]
    return hbase_raw(cluster, pool.table_name(TABLE), row_key(reader))


def follow(store: AppData, follower: int, followee: int, recent: int) -> list[WriteBody]:
    at = tick()
    graph.follow_user(store, follower, followee, at_ms=at)
    return follow_writes(store, FollowAction(follower, followee, "follow", at), recent=recent)


def unfollow(store: AppData, follower: int, followee: int, recent: int) -> list[WriteBody]:
    since = graph.follow_time(store, follower, followee)
    graph.unfollow_user(store, follower, followee)
    return follow_writes(store, FollowAction(follower, followee, "unfollow", tick(), follow_at=since), recent=recent)


def pins_of(store: AppData, count: int, name: str) -> tuple[int, list[int]]:
    """An account with ``count`` pins a second apart; its id and the pins, newest first."""
    pinner = user(store, name)
    board = graph.create_board(store, pinner, {"name": "b"}).id
    return pinner, [p.id for p in reversed([pin(store, pinner, board, tick()) for _ in range(count)])]


def counts(pair: ClusterPair, cluster: str, at_least: int) -> TrimCounts:
    """The coprocessor's counts on ``cluster`` once they show ``at_least``
    cells dropped (HBase copies them to JMX every ~10 s)."""
    pool = pair[cluster]
    assert pool.info_address is not None
    deadline = time.monotonic() + 40
    while True:
        found = trim_counts(cluster, pool.info_address)
        if found is not None and found.cells_dropped >= at_least:
            return found
        assert time.monotonic() < deadline, f"{cluster}: trimming counts {found}, expected >= {at_least} cells dropped"
        time.sleep(1)


def test_a_major_compaction_keeps_exactly_the_newest_cap_pins_and_writes_no_marker(
    own: ClusterPair, appdata: AppData
) -> None:
    cap = 100
    set_cap(own, cap)
    before = {pool.name: trim_counts(pool.name, pool.info_address) for pool in own if pool.info_address}
    earlier = {name: found.cells_dropped if found else 0 for name, found in before.items()}
    pinner, pins = pins_of(appdata, cap + 500, "prolific")
    small, few = pins_of(appdata, 40, "quiet")
    long_feed, short_feed = user(appdata, "long"), user(appdata, "short")
    apply_all(own, appdata, follow(appdata, long_feed, pinner, recent=cap + 500))
    apply_all(own, appdata, follow(appdata, short_feed, small, recent=40))
    assert feeds(own, long_feed) == pins  # the write path read nothing and trimmed nothing

    compact(own)
    assert feeds(own, long_feed) == pins[:cap]
    assert feeds(own, short_feed) == few
    for pool in own:
        cells = raw(own, pool.name, long_feed)
        assert [kind for kind, _c, _ts in cells] == ["Put"] * cap, "only the kept pins' puts, no delete marker"
        assert [parse_qualifier(c.split(b":", 1)[1]).pin_id for _k, c, _ts in cells] == pins[:cap]
        assert {kind for kind, _c, _ts in raw(own, pool.name, short_feed)} == {"Put"}
        assert counts(own, pool.name, earlier[pool.name] + 500).rows_trimmed >= 1


def test_unfollows_refollows_and_compactions_in_any_file_layout_agree_with_the_oracle(
    own: ClusterPair, appdata: AppData
) -> None:
    cap, recent = 3, 5
    set_cap(own, cap)
    a, a_pins = pins_of(appdata, recent, "a")
    b, b_pins = pins_of(appdata, recent, "b")  # all newer than a's
    reader = user(appdata, "reader")
    apply_all(own, appdata, follow(appdata, reader, a, recent))
    apply_all(own, appdata, follow(appdata, reader, b, recent))
    compact(own, flush_only=True)  # the pins in one file
    apply_all(own, appdata, unfollow(appdata, reader, a, recent))
    compact(own, flush_only=True)  # the unfollow's markers in a newer one
    assert feeds(own, reader) == b_pins

    compact(own)  # sees both files: a's pins are masked, so b's newest three are the feed
    assert feeds(own, reader) == b_pins[:cap]
    assert feed_differences(appdata, own, [reader], recent, trimmed={reader: (cap, True)}) == []

    apply_all(own, appdata, follow(appdata, reader, a, recent))  # a re-follow: a's pins at a new version
    assert feeds(own, reader) == b_pins[:cap] + a_pins
    assert feed_differences(appdata, own, [reader], recent, trimmed={reader: (cap, True)}) == []
    compact(own)
    assert feeds(own, reader) == b_pins[:cap]
    assert feed_differences(appdata, own, [reader], recent, trimmed={reader: (cap, True)}) == []

    # An unfollow after a compaction trimmed its follow's pins: its
    # retraction hides the rest, and the next compaction leaves nothing.
    late = user(appdata, "late")
    apply_all(own, appdata, follow(appdata, late, a, recent))
    compact(own)
    assert feeds(own, late) == a_pins[:cap]
    apply_all(own, appdata, unfollow(appdata, late, a, recent))
    assert feeds(own, late) == []
    compact(own)
    assert feeds(own, late) == [] and raw(own, "primary", late) == []
    assert feed_differences(appdata, own, [reader, late], recent, trimmed={reader: (cap, True)}) == []


def test_the_cap_is_a_table_attribute_that_takes_effect_at_the_next_major_compaction(
    own: ClusterPair, appdata: AppData
) -> None:
    set_cap(own, 30)
    pinner, pins = pins_of(appdata, 25, "pinner")
    reader = user(appdata, "reader")
    apply_all(own, appdata, follow(appdata, reader, pinner, recent=25))
    compact(own)
    assert feeds(own, reader) == pins  # under the cap

    set_cap(own, 10)  # an operator's alter: no rebuild, no restart
    assert feeds(own, reader) == pins  # nothing happens until a compaction
    compact(own)
    assert feeds(own, reader) == pins[:10]


def test_a_table_without_the_coprocessor_is_reported_and_its_cluster_trimmed_by_the_sweep(
    own: ClusterPair, appdata: AppData, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    set_cap(own, 1000)
    assert detach_coprocessor(own.standby, feed_table(1000))
    drift = table_drift(own.standby, feed_table(1000))
    assert [str(d) for d in drift] == [f"standby following_feed: coprocessor is none, defined {FEED_TRIM_OBSERVER}"]
    assert table_drift(own.primary, feed_table(1000)) == []
    assert (compaction_cap(own.primary, FOLLOWING_FEED), compaction_cap(own.standby, FOLLOWING_FEED)) == (1000, None)

    for name, value in (("PINLATER_HBASE_TABLE_PREFIX", own.primary.table_prefix), ("PINLATER_FEED_CAP", "1000")):
        monkeypatch.setenv(name, value)
    assert cli.main(["tables"]) == cli.DRIFT
    out = capsys.readouterr().out
    assert f"drift: standby following_feed: coprocessor is none, defined {FEED_TRIM_OBSERVER}" in out
    assert "trimming: primary following_feed by compaction, cap 1000" in out
    assert "trimming: standby following_feed by the sweep (no trimming coprocessor)" in out

    assert cli.main(["tables", "--apply"]) == 0  # attached again
    assert compaction_cap(own.standby, FOLLOWING_FEED) == 1000
    assert f"altered: standby following_feed: coprocessor is none, defined {FEED_TRIM_OBSERVER}" in \
        capsys.readouterr().out


def test_a_cluster_that_cannot_load_the_coprocessor_gets_the_table_without_it(
    own: ClusterPair, caplog: pytest.LogCaptureFixture
) -> None:
    elsewhere = feed_table(50)
    missing = type(elsewhere)("feed_elsewhere", elsewhere.families, "org.example.NotOnThisCluster", elsewhere.values)
    with caplog.at_level("WARNING", logger="tasks.hbase.tables"):
        assert ensure_table(own.primary, missing) is True
    assert "cannot load org.example.NotOnThisCluster there; table feed_elsewhere created without it" in caplog.text
    assert [d.setting for d in table_drift(own.primary, missing)] == ["coprocessor"]
    assert compaction_cap(own.primary, missing) is None
    with pytest.raises(HBaseError):  # another failure is not taken for a class it cannot load
        ensure_table(own.primary, type(missing)("nowhere:feed", missing.families, "org.example.NotOnThisCluster"))


CAP = 20


@pytest.mark.feed_settings(cap=CAP, trim_slack=0, trim_sample=1000, recent_pins=60, page_size=100)
def test_fanout_enqueues_trims_only_for_a_cluster_its_compactions_do_not_trim(world: FeedWorld) -> None:
    store, actions = world.store, world.actions
    pinner, board, readers = followed_pinner(store, 3)
    with trimming(world.pair, CAP, by_compaction=("primary",)):
        world.start_workers()
        created = []
        for _ in range(3):
            for _ in range(12):
                created.append(actions.create_pin(pinner, board, {"title": "p"}, created_at_ms=tick()))
            world.settle(60)
        newest = [p.id for p in reversed(created)]
        assert world.service.count(queues.TRIM, "succeeded") > 0
        for reader in readers:
            # The standby's rows were read and trimmed by jobs, keeping the
            # newest; the primary's were left whole for its compactions.
            on_standby = feed(world.pair, "standby", reader)
            assert CAP <= len(on_standby) < len(newest) and on_standby == newest[: len(on_standby)]
            assert feed(world.pair, "primary", reader) == newest
        actions.start_sweep()
        world.settle(60)
        for reader in readers:
            assert feed(world.pair, "standby", reader) == newest[:CAP]
            assert feed(world.pair, "primary", reader) == newest  # the sweep passed it over
        hbase_compact("primary", world.pair.primary.table_name(TABLE))
        for reader in readers:
            assert feeds(world.pair, reader) == newest[:CAP]
        assert world.failed_jobs() == {}
