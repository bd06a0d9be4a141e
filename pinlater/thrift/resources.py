"""What bounds the Thrift server's resources against hostile or broken
clients (the connection caps themselves live in ``pinlater.thrift.server``).

``ByteBudget``: the bytes of requests over 64 KiB (``SMALL_FRAME``) that the
server buffers at once, across connections. A connection reserves a
frame's declared size (read from its length prefix) before reading it and
releases it once the call is answered or the connection closes. When a
reservation does not fit, connections holding *stalled* partial frames
(nothing received for ``stall_s``) are closed, oldest frame first, until it
would; the reservation then waits for them to let go, at most ``wait_s``
(and never past the frame's own deadline). Past that the request is
refused: the server drains it without keeping it and answers with an
error. Frames up to 64 KiB reserve nothing: each connection's receive
buffer holds at most that much, so they are bounded by the number of
connections.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import resource
import threading
import time
from typing import Protocol

from pinlater.thrift.stats import ServerStats

log = logging.getLogger(__name__)

# A partial frame with nothing received for this long is stalled: its
# connection may be closed to make room for others.
STALL_S = 1.0


class Holder(Protocol):
    """A connection, as the budget sees it."""

    peer: str

    def frame_started(self) -> float | None: ...

    def stalled(self, now: float) -> bool: ...

    def shed(self) -> bool:
        """Closes the connection unless it is handling a call; whether it did."""
        ...


class ByteBudget:
    def __init__(self, capacity: int, stats: ServerStats | None = None, *, wait_s: float = 1.0) -> None:
        self.capacity = capacity
        self.wait_s = wait_s
        self.stats = stats or ServerStats()
        self.used = 0
        self._cond = threading.Condition()
        self._held: dict[Holder, int] = {}
        self._shedding: set[Holder] = set()  # closed by us, not released yet

    def reserve(self, holder: Holder, size: int, deadline: float) -> bool:
        """Whether ``holder`` may buffer ``size`` more bytes; may shed
        stalled holders and wait for them, until ``deadline`` at most."""
        if size > self.capacity:
            return False
        give_up = min(deadline, time.monotonic() + self.wait_s)
        with self._cond:
            while self.used + size > self.capacity:
                self._shed_stalled(self.used + size - self.capacity)
                left = give_up - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            self._held[holder] = self._held.get(holder, 0) + size
            self.used += size
        self.stats.count("buffered_bytes", size)
        return True

    def release(self, holder: Holder) -> None:
        """Gives back all that ``holder`` reserved (nothing if nothing)."""
        if holder not in self._held:
            # The common case (a request under 64 KiB reserves nothing):
            # no lock. Only the holder's own thread adds it to _held, and a
            # holder being shed is in _held until released.
            return
        with self._cond:
            size = self._held.pop(holder, 0)
            self._shedding.discard(holder)
            if not size:
                return
            self.used -= size
            self._cond.notify_all()
        self.stats.count("buffered_bytes", -size)

    def _shed_stalled(self, deficit: int) -> None:
        """Closes stalled holders, oldest frame first, until those closing
        hold ``deficit`` bytes (under the lock)."""
        freeing = sum(self._held[h] for h in self._shedding)
        if freeing >= deficit:
            return
        now = time.monotonic()
        stalled = [h for h in self._held if h not in self._shedding and h.stalled(now)]
        stalled.sort(key=lambda h: h.frame_started() or now)
        for holder in stalled:
            if freeing >= deficit:
                return
            if holder.shed():
                self._shedding.add(holder)
                freeing += self._held[holder]
                self.stats.count("connections_shed")
                log.info("closing connection from %s: its partial frame of %d bytes stalled and the buffer "
                         "budget of %d bytes is full", holder.peer, self._held[holder], self.capacity)


def raise_open_files_limit(wanted: int) -> int:
    """Raises this process's soft limit of open files to the hard limit (a
    connection is a file descriptor); returns the limit now in force and
    warns if it is below ``wanted``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d to %d: %s", soft, target, exc)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("open files limit is %d, below the %d the connection limit needs: raise `ulimit -n` "
                    "or lower PINLATER_SERVER_MAX_CONNECTIONS", soft, wanted)
    return int(soft)


_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def return_large_buffers_to_the_os(threshold: int = 1 << 20) -> bool:
    """Makes glibc's malloc serve blocks of ``threshold`` bytes or more with
    their own mmap, unmapped when freed.

    By default the threshold follows the largest block freed (up to 32 MiB):
    after the first large frame, frame buffers come from per-thread arenas
    that keep freed memory, and the process's memory grew by up to twice
    the byte budget under a flood of large partial frames (measured: 55 to
    106 MiB above baseline with 48 MiB of frames held; 55 with this set).
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
