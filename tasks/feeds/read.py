"""Feed reads: newest first with a cursor, from the primary, with a
speculative read of the standby.

The primary is asked first. If it fails, or has not answered after
``cutoff_s`` (near its p99.9), the standby is asked too, and the first good
answer wins; the loser's answer is dropped. A ``shadow_share`` of reads is
also sent to the standby and dropped, to keep its block cache warm for the
day it has to serve. Both clusters get every write (one job each), so
either answer is a feed; the standby's may lag by its queue's backlog.

The cursor is the last qualifier of the page (printable ASCII), and the
next page reads the columns after it, so a pin fanned out meanwhile does
not shift the pages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tasks.appdata import graph
from tasks.appdata.objects import AppObject
from tasks.appdata.store import AppData
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, row_key
from tasks.hbase import ClusterPair, ClusterPool, read_columns
from tasks.hbase.speculative import NeitherAnswered, SpeculativeReads

MAX_LIMIT = 500


@dataclass(frozen=True, slots=True)
class FeedPage:
    pins: list[AppObject]  # newest first; pins gone from the app data are left out
    next_cursor: str | None  # None: the end of the feed
    served_by: str  # "primary" or "standby"


class FeedUnavailable(Exception):
    """Neither cluster answered."""


def check_page(cursor: str | None, limit: int) -> bytes | None:
    """The qualifier a page starts after; ValueError for a limit out of
    1..MAX_LIMIT or a cursor no page handed out. Callers that must tell the
    caller's error from an outage check here first: ``read`` calls it too."""
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an int in 1..{MAX_LIMIT}, got {limit!r}")
    if cursor is None:
        return None
    after = cursor.encode("ascii", errors="replace")
    try:
        parse_qualifier(after)
    except ValueError:
        raise ValueError(f"not a cursor of this feed: {cursor[:40]!r}") from None
    return after


class FeedReader:
    def __init__(
        self,
        pair: ClusterPair,
        store: AppData,
        cutoff_s: float,
        shadow_share: float = 0.0,
        *,
        threads: int = 8,
        rng: random.Random | None = None,
    ) -> None:
        if not cutoff_s >= 0:
            raise ValueError(f"cutoff_s must be >= 0, got {cutoff_s}")
        self.pair = pair
        self.store = store
        self.cutoff_s = cutoff_s
        self.shadow_share = shadow_share
        self._reads: SpeculativeReads[list[bytes]] = SpeculativeReads(
            pair, cutoff_s, shadow_share, threads=threads, name="feed-read", rng=rng)

    def close(self) -> None:
        self._reads.close()

    def read(self, user: int, cursor: str | None = None, limit: int = 50) -> FeedPage:
        after = check_page(cursor, limit)
        row = row_key(user)

        def columns(pool: ClusterPool) -> list[bytes]:
            return [q for q, _value in read_columns(pool, TABLE, row, family=FAMILY, limit=limit + 1, after=after)]

        try:
            served_by, qualifiers = self._reads.read(columns)
        except NeitherAnswered as exc:
            raise FeedUnavailable(str(exc)) from None
        more = len(qualifiers) > limit
        qualifiers = qualifiers[:limit]
        pin_ids = [parse_qualifier(q).pin_id for q in qualifiers]
        pins = graph.get_pins(self.store, pin_ids) if pin_ids else []
        next_cursor = qualifiers[-1].decode("ascii") if more else None
        return FeedPage(pins, next_cursor, served_by)
