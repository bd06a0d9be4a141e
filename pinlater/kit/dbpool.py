"""The checkout half of a DB-API connection pool, whatever the database: a
few idle connections shared by threads, each unit of work borrowing one.

What it does: reuse the most recently returned connection; ping one idle
for longer than ``idle_ping_s`` before handing it out (after a server
restart every pooled connection is dead, and a ping, unlike a statement, is
safe to fail and replace); open a new one with the injected ``connect``
when none is idle; keep at most ``max_idle``; and on ``flush`` (the server
turned out to be unreachable) drop every idle connection and refuse the
ones in use when they come back. What a failed connect means is the
owner's (``open_failed``): the job service's stores raise "shard
unavailable", the app-data layer its own errors.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")

IDLE_PING_S = 2.0


def close_quietly(conn: object) -> None:
    """Close ``conn``; already closed, or its socket dead, it is gone either way."""
    with contextlib.suppress(Exception):
        conn.close()  # type: ignore[attr-defined]


class PoolCore(Generic[C]):
    """Idle connections of one server. ``connect`` opens one; ``ping`` checks
    one that was idle a while (raising if dead); ``open_failed`` turns a
    failed ``connect`` into the exception to raise (None: raise it as is)."""

    def __init__(
        self,
        connect: Callable[[], C],
        *,
        ping: Callable[[C], object],
        open_failed: Callable[[Exception], Exception | None] = lambda exc: None,
        max_idle: int = 8,
        idle_ping_s: float = IDLE_PING_S,
    ) -> None:
        self._connect = connect
        self._ping = ping
        self._open_failed = open_failed
        self._max_idle = max_idle
        self._idle_ping_s = idle_ping_s
        self._idle: queue.LifoQueue[tuple[C, int, float]] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._generation = 0  # bumped by flush(): older connections are not reused

    def checkout(self) -> tuple[C, int]:
        """A connection and its generation, to give back to ``checkin``."""
        while True:
            try:
                conn, generation, last_used = self._idle.get_nowait()
            except queue.Empty:
                break
            if generation != self._generation:
                close_quietly(conn)
                continue
            if time.monotonic() - last_used < self._idle_ping_s:
                return conn, generation
            try:
                self._ping(conn)
                return conn, generation
            except Exception:  # noqa: BLE001 -- dead while idle: replace it with a new one
                close_quietly(conn)
        generation = self._generation
        try:
            return self._connect(), generation
        except Exception as exc:
            mapped = self._open_failed(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    def checkin(self, conn: C, generation: int) -> None:
        """Give ``conn`` back: kept idle unless flushed since, or enough are."""
        if generation == self._generation and self._idle.qsize() < self._max_idle:
            self._idle.put((conn, generation, time.monotonic()))
        else:
            close_quietly(conn)

    def flush(self) -> None:
        """Close every idle connection; ones in use are closed when returned."""
        with self._lock:
            self._generation += 1
        while True:
            try:
                conn, _, _ = self._idle.get_nowait()
            except queue.Empty:
                return
            close_quietly(conn)
