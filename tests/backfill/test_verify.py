"""Verify on planted differences (no workers: the kind's functions and the
verify rounds in this process): a follow with no cells, a pin no follow
brings, a stale version under a good one, and a pin masked by a trim's
delete: one round repairs all but the last, which verify reports and
leaves (what a trim removed stays removed)."""

from __future__ import annotations

import uuid

from tasks.appdata import graph
from tasks.appdata.settings import PREFIX_VAR
from tasks.appdata.store import AppData
from tasks.backfill import kinds
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.verify import verify
from tasks.feeds.backfill_kind import FeedsKind
from tasks.feeds.cells import TABLE, column, qualifier, row_key
from tasks.feeds.follow import FollowAction, follow_writes
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, delete_versions, put_versions
from tests.backfill.conftest import ENV as DIRECTORY_ENV
from tests.backfill.helpers import data_fixtures, expected_columns, row
from tests.feeds.helpers import apply_all, feed_versions, pin, tick, user

# A store and tables of its own: verify walks every user of the store, and
# the directory's other tests may leave feeds a backfill has not written yet.
TAG = uuid.uuid4().hex[:8]
ENV = {**DIRECTORY_ENV, PREFIX_VAR: f"appdata_bv{TAG}_", "PINLATER_HBASE_TABLE_PREFIX": f"bv{TAG}"}


store, pair = data_fixtures(ENV, "module")


def test_verify_repairs_until_only_trimmed_pins_differ(store: AppData, pair: ClusterPair) -> None:
    ctx = BackfillContext(store, pair, ENV)
    reader, late, followee, stranger = (user(store, n) for n in ("reader", "late", "followee", "stranger"))
    board = graph.create_board(store, followee, {"name": "b"}).id
    other_board = graph.create_board(store, stranger, {"name": "s"}).id
    masked, kept = pin(store, followee, board, tick()), pin(store, followee, board, tick())
    unreachable = pin(store, stranger, other_board, tick())
    followed_at = tick()
    graph.follow_user(store, reader, followee, at_ms=followed_at)
    graph.follow_user(store, late, followee, at_ms=tick())
    kind = FeedsKind()
    assert kind.backfill(ctx, PRIMARY, [reader]) == 2
    assert kind.backfill(ctx, STANDBY, [reader, late]) == 4  # the standby stays equal to the truth
    primary, key = pair[PRIMARY], row_key(reader)
    # A trim's delete of one pin, a pin nobody follows, and a version of a
    # follow that is no more over a good pin.
    delete_versions(primary, TABLE, [(key, column(masked.created_at_ms, masked.id), followed_at + 5000, "upto")])
    gone_follow = tick()
    put_versions(primary, TABLE, [(key, column(unreachable.created_at_ms, unreachable.id), b"", gone_follow),
                                  (key, column(kept.created_at_ms, kept.id), b"", gone_follow)])

    rounds = verify(ctx, kinds.get("feeds"), PRIMARY, page_size=16, max_rounds=3)
    # 1: late's two pins, the masked pin, the extra pin, the stale version;
    # then only the masked pin, reported and left alone.
    assert [r.differences for r in rounds] == [5, 1, 1], [r.samples for r in rounds]
    assert {d.what.split(" (")[0] for d in rounds[1].samples} == {f"missing pin {masked.id}"}
    assert rounds[1].samples[0].seen_before and rounds[2].repaired == 0
    assert set(row(pair, PRIMARY, late)) == set(expected_columns(ctx, PRIMARY, late))
    cells = row(pair, PRIMARY, reader)
    assert set(cells) == set(expected_columns(ctx, PRIMARY, reader)) - {
        qualifier(masked.created_at_ms, masked.id).decode()}
    assert cells[qualifier(kept.created_at_ms, kept.id).decode()] == followed_at
    # The repaired row is the standby's, version for version.
    late_at = graph.follow_time(store, late, followee)
    assert feed_versions(pair, late) == {kept.id: {late_at}, masked.id: {late_at}}
    # The next test's verify starts from every feed equal to the truth: both follows undone.
    for who in (reader, late):
        since = graph.follow_time(store, who, followee)
        graph.unfollow_user(store, who, followee)
        apply_all(pair, store, follow_writes(store, FollowAction(who, followee, "unfollow", tick(), follow_at=since)))
    assert [r.differences for r in verify(ctx, kinds.get("feeds"), PRIMARY, page_size=16)] == [0]
