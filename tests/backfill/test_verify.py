"""Verify on planted differences (no workers: the kind's functions and the
verify rounds in this process): a follow with no cells, a pin no follow
reaches, and a put masked by a delete marker later than the follow, which
only a put at the current time can show: three rounds, then nothing."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.backfill import kinds
from tasks.backfill.feeds_kind import FeedsKind
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.verify import verify
from tasks.feeds.cells import TABLE, column, qualifier, row_key
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, delete_cells, put_cells
from tests.backfill.conftest import ENV
from tests.backfill.helpers import expected_columns, row
from tests.feeds.helpers import pin, tick, user


def test_verify_repairs_until_nothing_differs(store: AppData, pair: ClusterPair) -> None:
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
    # A delete marker after the follow (as a trim may leave), and a pin nobody followed.
    delete_cells(pair[PRIMARY], TABLE, {row_key(reader): [column(masked.created_at_ms, masked.id)]},
                 timestamp=followed_at + 5000)
    extra_at = tick()
    put_cells(pair[PRIMARY], TABLE, {row_key(reader): {column(unreachable.created_at_ms, unreachable.id): b""}},
              timestamp=extra_at)

    rounds = verify(ctx, kinds.get("feeds"), PRIMARY, page_size=16)
    # 1: late's two pins, the masked pin, the extra pin; 2: the masked pin
    # again (its put at the follow's time stayed masked), put at the current time.
    assert [r.differences for r in rounds] == [4, 1, 0], [r.samples for r in rounds]
    assert {d.what.split(" (")[0] for d in rounds[1].samples} == {f"missing pin {masked.id}"}
    assert rounds[1].samples[0].seen_before
    for who in (reader, late):
        assert set(row(pair, PRIMARY, who)) == set(expected_columns(ctx, PRIMARY, who))
    cells = row(pair, PRIMARY, reader)
    assert cells[qualifier(kept.created_at_ms, kept.id).decode()] == followed_at
    assert cells[qualifier(masked.created_at_ms, masked.id).decode()] > followed_at + 5000
