"""Wake-ups, sent off the publishing thread.

After each enqueue the publisher owes consumers a wake-up on the queue's
channel. Sending it inline doubles a publish's round trips; here a
per-process thread sends them, coalesced: every queue marked before a send
begins is covered by that send, and one marked during it by the next, so
each enqueue is still followed by a wake-up. Sends are at least
``COALESCE_S`` apart: under a burst of publishes that is one PUBLISH per
queue every few milliseconds instead of one per job, and the thread
wakes (and takes the GIL from the publisher) as seldom. A wake-up is at
most that much later; one lost at process exit only costs latency:
consumers' slow poll finds the job.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

import redis

log = logging.getLogger(__name__)

# Least time between two sends: the most a wake-up waits for company. An
# idle consumer is woken at most this late during a burst of publishes (a
# busy one claims without wake-ups); the first publish after a quiet spell
# wakes at once.
COALESCE_S = 0.005


class Waker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[int, tuple[Any, set[str]]] = {}
        self._pid = 0
        self._busy = False
        self._idle = False  # the thread waits for a mark: a mark must notify it

    def wake(self, bus: Any, channel: str) -> None:
        with self._cond:
            if self._pid != os.getpid():
                # First use in this process (or after a fork): own thread.
                self._pid = os.getpid()
                self._pending = {}
                self._busy = False
                self._idle = False
                threading.Thread(target=self._run, name="pinlater-waker", daemon=True).start()
            entry = self._pending.get(id(bus))
            if entry is None:
                entry = self._pending[id(bus)] = (bus, set())
            entry[1].add(channel)
            if self._idle:
                # notify_all: a flush() may be waiting on the same condition.
                self._idle = False
                self._cond.notify_all()

    def _run(self) -> None:
        last_send = 0.0
        while True:
            with self._cond:
                while not self._pending:
                    self._busy = False
                    self._idle = True
                    self._cond.notify_all()
                    self._cond.wait()
                self._idle = False
                self._busy = True
            # Marks made while this thread sleeps join the coming send.
            time.sleep(max(0.0, last_send + COALESCE_S - time.monotonic()))
            with self._cond:
                batch, self._pending = self._pending, {}
            last_send = time.monotonic()
            for bus, channels in batch.values():
                try:
                    if len(channels) == 1:
                        # The usual case, one queue: a plain command costs
                        # less than a pipeline (this thread holds the GIL
                        # the publisher wants meanwhile).
                        bus.publish(next(iter(channels)), b"")
                        continue
                    pipe = bus.pipeline(transaction=False)
                    for channel in channels:
                        pipe.publish(channel, b"")
                    pipe.execute()
                except (redis.RedisError, OSError) as exc:
                    log.warning("wake-ups not sent (consumers' slow poll will find the jobs): %s", exc)

    def flush(self, timeout: float = 1.0) -> None:
        """Waits until every wake-up marked so far is sent."""
        with self._cond:
            if self._pid == os.getpid():
                self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)


WAKER = Waker()
atexit.register(WAKER.flush)
