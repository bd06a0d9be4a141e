"""The "feeds" backfill kind (``tasks.backfill``): following feeds rebuilt
from the truth; the app's manifest (``tasks.feeds.app``) names it.

A user's feed, from app-data MySQL: for each user and board they follow
(``user_follows_user`` / ``user_follows_board``, whose ``sequence`` is the
follow's time), the pins that follow brings (``tasks.feeds.follow.window``),
each at the follow's time as its version: exactly the cells the follow's
own job and the fan-outs write (``tasks.feeds.writes``). An unfollow's
retraction masks them whenever they land, and the write's own check of the
follows retracts what a late backfill page puts for a follow gone since.

Verify reads every version of the row first (so whatever it finds was
written before it read MySQL), then the truth, and compares them version by
version:
- missing: a (pin, follow) the truth has and the row does not, unless the
  row is at or over the cap and the pin is older than its oldest column
  (trimmed: the trimmer's business). Repaired by putting it at the
  follow's version (with the write's check); one still missing in the next
  round is masked by a trim's delete, and stays so (a trim is final);
- extra: a version of a pin that no current follow brings (a follow gone,
  or one whose pins are others). Repaired by deleting exactly that version:
  a follow since made has a later time, so nothing else is masked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasks.appdata import mappings
from tasks.appdata.tables import USER_FOLLOWS_BOARD, USER_FOLLOWS_USER
from tasks.backfill.kinds import BackfillContext, Difference
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, row_key
from tasks.feeds.follow import window
from tasks.feeds.settings import FeedSettings
from tasks.feeds.tables import FOLLOWING_FEED
from tasks.feeds.writes import EdgeCells, put_edges
from tasks.hbase import delete_versions
from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.reads import get_versions

MISSING, EXTRA = "missing", "extra"
_FAMILY = FAMILY.encode()


@dataclass(frozen=True, slots=True)
class CellFix:
    """A ``Difference`` payload: one version of one column to put or delete."""

    problem: str  # missing | extra
    column: str  # qualifier, without the family
    version: int
    followee: int  # missing: the follow that brings it; extra: 0


@dataclass(slots=True)
class FeedTruth:
    """One user's feed as MySQL says it should be."""

    edges: list[EdgeCells] = field(default_factory=list)
    expected: dict[str, dict[int, int]] = field(default_factory=dict)  # column -> {version: followee}


def truth(ctx: BackfillContext, user: int, settings: FeedSettings) -> FeedTruth:
    out = FeedTruth()
    for table in (USER_FOLLOWS_USER, USER_FOLLOWS_BOARD):
        for edge in mappings.walk(ctx.store, table, user):
            columns = tuple(window(ctx.store, edge.to_id, edge.sequence, recent=settings.recent_pins,
                                   cap=settings.cap))
            out.edges.append(EdgeCells(user, edge.to_id, edge.sequence, columns))
            for column in columns:
                out.expected.setdefault(column.decode("ascii"), {})[edge.sequence] = edge.to_id
    return out


def row_versions(ctx: BackfillContext, cluster: str, user: int) -> dict[str, set[int]]:
    """Every column of ``user``'s row with each version a read can reach
    (masked versions are not returned)."""
    row = row_key(user)
    found = get_versions(ctx.pair[cluster], TABLE, [row], columns=[_FAMILY], max_versions=ALL_VERSIONS).get(row, {})
    return {column.split(b":", 1)[1].decode("ascii"): {ts for ts, _value in versions}
            for column, versions in found.items()}


class FeedsKind:
    name = "feeds"

    def backfill(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> int:
        pool = ctx.ready(cluster, FOLLOWING_FEED)
        settings = FeedSettings.from_env(ctx.env)
        edges = [e for user in user_ids for e in truth(ctx, user, settings).edges if e.columns]
        return put_edges(pool, ctx.store, edges)

    def diff(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> list[Difference]:
        ctx.ready(cluster, FOLLOWING_FEED)
        settings = FeedSettings.from_env(ctx.env)
        out: list[Difference] = []
        for user in user_ids:
            have = row_versions(ctx, cluster, user)  # the row first, then the truth: see the docstring
            want = truth(ctx, user, settings)
            out += _missing(user, want, have, settings.cap) + _extra(user, want, have)
        return out

    def repair(self, ctx: BackfillContext, cluster: str, diffs: Sequence[Difference], round_no: int) -> int:
        pool = ctx.ready(cluster, FOLLOWING_FEED)
        puts: dict[tuple[int, int, int], list[bytes]] = defaultdict(list)
        deletes = []
        for diff in diffs:
            fix = diff.payload
            assert isinstance(fix, CellFix), fix
            if fix.problem == MISSING and diff.seen_before:
                # Put last round and still not there: a trim's delete masks
                # it, and what a trim removed stays removed.
                continue
            if fix.problem == MISSING:
                puts[(diff.user_id, fix.followee, fix.version)].append(fix.column.encode("ascii"))
            else:
                deletes.append((row_key(diff.user_id), _FAMILY + b":" + fix.column.encode("ascii"), fix.version,
                                "version"))
        edges = [EdgeCells(user, followee, version, tuple(columns)) for (user, followee, version), columns in
                 puts.items()]
        done = put_edges(pool, ctx.store, edges) if edges else 0
        return done + (delete_versions(pool, TABLE, deletes) if deletes else 0)


def _missing(user: int, want: FeedTruth, have: dict[str, set[int]], cap: int) -> list[Difference]:
    columns = sorted(have)
    oldest = columns[-1] if len(columns) >= cap else None  # a row at the cap: older pins are trimmed
    out = []
    for column, versions in sorted(want.expected.items()):
        if oldest is not None and column > oldest:
            continue
        for version, followee in sorted(versions.items()):
            if version not in have.get(column, ()):
                pin = parse_qualifier(column.encode("ascii")).pin_id
                out.append(Difference(user, f"missing pin {pin} (followed at {version})",
                                      CellFix(MISSING, column, version, followee)))
    return out


def _extra(user: int, want: FeedTruth, have: dict[str, set[int]]) -> list[Difference]:
    out = []
    for column, versions in sorted(have.items()):
        for version in sorted(versions - set(want.expected.get(column, {}))):
            pin = parse_qualifier(column.encode("ascii")).pin_id
            out.append(Difference(user, f"extra pin {pin} at {version} (brought by no current follow)",
                                  CellFix(EXTRA, column, version, 0)))
    return out


FEEDS = FeedsKind()
