"""Reads that either cluster of a pair may answer: the primary first; the
standby as well when the primary fails or has not answered after a cut-off
(near the primary's p99.9), the first good answer winning and the other
dropped. A hung region server, a paused host or a black-holed link then
costs a read the cut-off, not the call timeout. A share of reads may also
be sent to the standby and dropped ("shadow" reads), to keep its block
cache warm for the day it has to serve.

Each cluster has its own threads with a cap on reads in flight: a stalled
cluster ties up its own threads only, and once they all wait on it, reads
skip it rather than queue behind them. A read runs in a copy of its
caller's context (the trace it belongs to, above all).
"""

from __future__ import annotations

import contextvars
import random
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

from tasks.hbase.errors import HBaseError
from tasks.hbase.pair import PRIMARY, STANDBY, ClusterPair
from tasks.hbase.pool import ClusterPool

T = TypeVar("T")


class NeitherAnswered(Exception):
    """Neither cluster gave an answer: ``failures`` lists each one asked
    with its error, and ``saturated`` the clusters skipped because all
    their threads were busy."""

    def __init__(self, failures: list[tuple[str, BaseException]], saturated: list[str], threads: int) -> None:
        self.failures, self.saturated, self.threads = failures, saturated, threads
        parts = [str(error) for _cluster, error in failures]
        if saturated and not failures:
            parts.append(f"both clusters have {threads} reads in flight")
        super().__init__("; ".join(parts))


class SpeculativeReads(Generic[T]):
    """``read(fn)`` calls ``fn(pool)`` on the primary, and on the standby too
    after ``cutoff_s`` (or at once when the primary fails), and returns
    ``(cluster, answer)`` of the first that answers. An ``HBaseError`` sends
    the read to the other cluster; any other error is the caller's bug and
    raised as it is."""

    def __init__(
        self,
        pair: ClusterPair,
        cutoff_s: float,
        shadow_share: float = 0.0,
        *,
        threads: int = 8,
        name: str = "read",
        rng: random.Random | None = None,
    ) -> None:
        if not cutoff_s >= 0:
            raise ValueError(f"cutoff_s must be >= 0, got {cutoff_s}")
        if not 0.0 <= shadow_share <= 1.0:
            raise ValueError(f"shadow_share must be in 0..1, got {shadow_share}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.pair = pair
        self.cutoff_s = cutoff_s
        self.shadow_share = shadow_share
        self._threads = threads
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._executors = {
            cluster: ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"{name}-{cluster}")
            for cluster in (PRIMARY, STANDBY)
        }
        self._in_flight = dict.fromkeys((PRIMARY, STANDBY), 0)
        self._flight_lock = threading.Lock()

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)

    def read(self, fn: Callable[[ClusterPool], T]) -> tuple[str, T]:
        """Raises NeitherAnswered."""
        primary = self._submit(PRIMARY, fn)
        if primary is not None:
            done, _ = wait([primary], timeout=self.cutoff_s)
            if done and primary.exception() is None:
                if self._shadow():
                    shadow = self._submit(STANDBY, fn)
                    if shadow is not None:
                        shadow.add_done_callback(_drop)
                return PRIMARY, primary.result()
        # Failed, late or saturated: ask the standby as well; the first good answer wins.
        standby = self._submit(STANDBY, fn)
        names: dict[Future[T], str] = {}
        if primary is not None:
            names[primary] = PRIMARY
        if standby is not None:
            names[standby] = STANDBY
        saturated = [c for c, f in ((PRIMARY, primary), (STANDBY, standby)) if f is None]
        pending = set(names)
        failures: list[tuple[str, BaseException]] = []
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
                failures.append((names[future], error))
        raise NeitherAnswered(sorted(failures, key=lambda f: f[0] != PRIMARY), saturated, self._threads)

    def _submit(self, cluster: str, fn: Callable[[ClusterPool], T]) -> Future[T] | None:
        """The read on ``cluster``'s threads, or None when all of them are busy."""
        with self._flight_lock:
            if self._in_flight[cluster] >= self._threads:
                return None
            self._in_flight[cluster] += 1
        try:
            # In the caller's context: its trace's span is the read's parent.
            context = contextvars.copy_context()
            future = self._executors[cluster].submit(context.run, fn, self.pair[cluster])
        except RuntimeError:  # closed
            self._landed(cluster)
            raise
        future.add_done_callback(lambda _f: self._landed(cluster))
        return future

    def _landed(self, cluster: str) -> None:
        with self._flight_lock:
            self._in_flight[cluster] -= 1

    def _shadow(self) -> bool:
        if self.shadow_share <= 0:
            return False
        with self._rng_lock:
            return self._rng.random() < self.shadow_share


def _drop(future: Future[T]) -> None:
    """A dropped read: its answer and its error are not anyone's concern."""
    if not future.cancelled():
        future.exception()
