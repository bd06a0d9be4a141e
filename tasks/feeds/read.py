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
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from tasks.appdata import graph
from tasks.appdata.objects import AppObject
from tasks.appdata.store import AppData
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, row_key
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, HBaseError, read_columns

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
        if not 0.0 <= shadow_share <= 1.0:
            raise ValueError(f"shadow_share must be in 0..1, got {shadow_share}")
        self.pair = pair
        self.store = store
        self.cutoff_s = cutoff_s
        self.shadow_share = shadow_share
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        # One pool per cluster, each with a cap on reads in flight: a stalled
        # cluster ties up its own threads only, and once they are all waiting
        # on it, reads skip it rather than queue behind them.
        self._threads = threads
        self._executors = {
            name: ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"feed-read-{name}")
            for name in (PRIMARY, STANDBY)
        }
        self._in_flight = dict.fromkeys((PRIMARY, STANDBY), 0)
        self._flight_lock = threading.Lock()

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)

    def read(self, user: int, cursor: str | None = None, limit: int = 50) -> FeedPage:
        after = check_page(cursor, limit)
        served_by, qualifiers = self._speculative(row_key(user), after, limit + 1)
        more = len(qualifiers) > limit
        qualifiers = qualifiers[:limit]
        pin_ids = [parse_qualifier(q).pin_id for q in qualifiers]
        pins = graph.get_pins(self.store, pin_ids) if pin_ids else []
        next_cursor = qualifiers[-1].decode("ascii") if more else None
        return FeedPage(pins, next_cursor, served_by)

    def _read_one(self, cluster: str, row: bytes, after: bytes | None, limit: int) -> list[bytes]:
        columns = read_columns(self.pair[cluster], TABLE, row, family=FAMILY, limit=limit, after=after)
        return [q for q, _value in columns]

    def _submit(self, cluster: str, row: bytes, after: bytes | None, limit: int) -> Future[list[bytes]] | None:
        """The read on ``cluster``'s pool, or None when all its threads are busy."""
        with self._flight_lock:
            if self._in_flight[cluster] >= self._threads:
                return None
            self._in_flight[cluster] += 1
        future = self._executors[cluster].submit(self._read_one, cluster, row, after, limit)
        future.add_done_callback(lambda _f: self._landed(cluster))
        return future

    def _landed(self, cluster: str) -> None:
        with self._flight_lock:
            self._in_flight[cluster] -= 1

    def _speculative(self, row: bytes, after: bytes | None, limit: int) -> tuple[str, list[bytes]]:
        primary = self._submit(PRIMARY, row, after, limit)
        if primary is not None:
            done, _ = wait([primary], timeout=self.cutoff_s)
            if done and primary.exception() is None:
                if self._shadow():
                    shadow = self._submit(STANDBY, row, after, limit)
                    if shadow is not None:
                        shadow.add_done_callback(_drop)
                return PRIMARY, primary.result()
        # Failed, late or saturated: ask the standby as well; the first good answer wins.
        standby = self._submit(STANDBY, row, after, limit)
        names: dict[Future[list[bytes]], str] = {}
        if primary is not None:
            names[primary] = PRIMARY
        if standby is not None:
            names[standby] = STANDBY
        if not names:
            raise FeedUnavailable(f"both clusters have {self._threads} reads in flight")
        pending = set(names)
        errors: list[BaseException] = []
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                error = future.exception()
                if error is None:
                    for loser in pending:
                        loser.add_done_callback(_drop)
                    return names[future], future.result()
                if not isinstance(error, HBaseError):
                    raise error
                errors.append(error)
        raise FeedUnavailable("; ".join(str(e) for e in errors))

    def _shadow(self) -> bool:
        if self.shadow_share <= 0:
            return False
        with self._rng_lock:
            return self._rng.random() < self.shadow_share


def _drop(future: Future[list[bytes]]) -> None:
    """A dropped read: its answer and its error are not anyone's concern."""
    if not future.cancelled():
        future.exception()
