"""The "feeds" backfill kind: following feeds rebuilt from the truth.

A user's feed, from app-data MySQL: for each user and board they follow
(``user_follows_user`` / ``user_follows_board``, whose ``sequence`` is the
follow's time), the followee's newest ``PINLATER_FEED_RECENT_PINS`` pins,
put into the user's row at the follow's time: exactly the cells the
follow's own job writes (``tasks.feeds.follow.follow_writes``). Because the
timestamp is the follow's time, an unfollow's delete (at the later
unfollow time) still masks them, and a backfill write never hides a newer
real-time one.

Verify compares the row with that truth:
- missing: an expected column not in the row, unless the row is at or over
  the cap and the pin is older than its oldest column (trimmed: the
  trimmer's business);
- extra: a column whose pin (its pinner and board are in the pin's JSON) is
  reachable through no current follow. Pins put by fan-out after a follow
  are not in the expected set but are reachable, so they are not extra.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasks.appdata import graph, mappings
from tasks.appdata.store import now_ms
from tasks.appdata.tables import USER_FOLLOWS_BOARD, USER_FOLLOWS_USER
from tasks.backfill import kinds
from tasks.backfill.kinds import BackfillContext, Difference
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, row_key
from tasks.feeds.follow import FollowAction, follow_writes
from tasks.feeds.settings import FeedSettings
from tasks.feeds.writes import Op, WriteBody, apply_write
from tasks.hbase import FOLLOWING_FEED, ClusterPool
from tasks.hbase.reads import read_cells

ROW_PAGE = 5000  # columns per read of a row
MISSING, EXTRA = "missing", "extra"


@dataclass(frozen=True, slots=True)
class CellFix:
    """A ``Difference`` payload: one column of one row to put or delete."""

    problem: str  # missing | extra
    column: str  # qualifier, without the family
    timestamp: int  # missing: the follow's time; extra: the cell's own


@dataclass(slots=True)
class FeedTruth:
    """One user's feed as MySQL says it should be."""

    users: set[int] = field(default_factory=set)  # followed users
    boards: set[int] = field(default_factory=set)  # followed boards
    puts: list[WriteBody] = field(default_factory=list)  # the follows' puts, on one cluster
    expected: dict[str, int] = field(default_factory=dict)  # column -> the latest follow time putting it


def truth(ctx: BackfillContext, cluster: str, user: int, recent: int) -> FeedTruth:
    out = FeedTruth()
    for table, followed in ((USER_FOLLOWS_USER, out.users), (USER_FOLLOWS_BOARD, out.boards)):
        for edge in mappings.walk(ctx.store, table, user):
            followed.add(edge.to_id)
            action = FollowAction(user, edge.to_id, "follow", edge.sequence)
            out.puts += [body for body in follow_writes(ctx.store, action, recent=recent) if body.cluster == cluster]
    for body in out.puts:
        for column in body.columns:
            out.expected[column] = max(out.expected.get(column, 0), body.timestamp)
    return out


def row_cells(pool: ClusterPool, user: int) -> list[tuple[str, int]]:
    """Every (column, timestamp) of ``user``'s row, newest pin first."""
    cells: list[tuple[str, int]] = []
    after: bytes | None = None
    while True:
        page = read_cells(pool, TABLE, row_key(user), family=FAMILY, limit=ROW_PAGE, after=after)
        cells += [(q.decode("ascii"), ts) for q, _value, ts in page]
        if len(page) < ROW_PAGE:
            return cells
        after = page[-1][0]


class FeedsKind:
    name = "feeds"

    def backfill(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> int:
        ctx.ready(cluster, FOLLOWING_FEED)
        recent = FeedSettings.from_env(ctx.env).recent_pins
        return sum(apply_write(ctx.pair, body) for user in user_ids for body in truth(ctx, cluster, user, recent).puts)

    def diff(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> list[Difference]:
        pool = ctx.ready(cluster, FOLLOWING_FEED)
        settings = FeedSettings.from_env(ctx.env)
        out: list[Difference] = []
        for user in user_ids:
            want = truth(ctx, cluster, user, settings.recent_pins)
            have = row_cells(pool, user)
            out += _missing(user, want, have, settings.cap) + _extra(ctx, user, want, have)
        return out

    def repair(self, ctx: BackfillContext, cluster: str, diffs: Sequence[Difference], round_no: int) -> int:
        ctx.ready(cluster, FOLLOWING_FEED)
        now = now_ms()
        batches: dict[tuple[Op, int, int], list[str]] = defaultdict(list)
        for diff in diffs:
            fix = diff.payload
            assert isinstance(fix, CellFix), fix
            if fix.problem == MISSING:
                # Put at the follow's time, like the follow. If the put of
                # the last round did not show, a delete marker at or after
                # that time masks it (a trim's, or an unfollow's of an older
                # follow of the same pin): put at the current time, which a
                # later unfollow's delete still masks.
                batches[("put", diff.user_id, now if diff.seen_before else fix.timestamp)].append(fix.column)
            else:
                # At the extra cell's own time: masks it, not a newer put.
                batches[("delete", diff.user_id, fix.timestamp)].append(fix.column)
        return sum(apply_write(ctx.pair, WriteBody(op, cluster, (user,), tuple(columns), ts))
                   for (op, user, ts), columns in batches.items())


def _missing(user: int, want: FeedTruth, have: list[tuple[str, int]], cap: int) -> list[Difference]:
    present = {column for column, _ts in have}
    oldest = have[-1][0] if len(have) >= cap else None  # a row at the cap: older pins are trimmed
    out = []
    for column, ts in sorted(want.expected.items()):
        if column in present or (oldest is not None and column > oldest):
            continue
        pin = parse_qualifier(column.encode("ascii")).pin_id
        out.append(Difference(user, f"missing pin {pin} (followed at {ts})", CellFix(MISSING, column, ts)))
    return out


def _extra(ctx: BackfillContext, user: int, want: FeedTruth, have: list[tuple[str, int]]) -> list[Difference]:
    unexpected = {parse_qualifier(c.encode("ascii")).pin_id: (c, ts) for c, ts in have if c not in want.expected}
    if not unexpected:
        return []
    reachable = {
        pin.id for pin in graph.get_pins(ctx.store, list(unexpected))
        if pin.data.get("user_id") in want.users or pin.data.get("board_id") in want.boards
    }
    return [Difference(user, f"extra pin {pin} (reachable through no follow)", CellFix(EXTRA, column, ts))
            for pin, (column, ts) in sorted(unexpected.items()) if pin not in reachable]


kinds.register(FeedsKind())
