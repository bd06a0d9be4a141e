"""Wake-ups, sent off the publishing thread.

After each enqueue the publisher owes consumers a wake-up on the queue's
channel. Sending it inline doubles a publish's round trips; here a
per-process thread sends them, coalesced: every queue marked before a send
begins is covered by that send, and one marked during it by the next, so
each enqueue is still followed by a wake-up. Under a burst of publishes
that is one PUBLISH per queue per round instead of one per job. A wake-up
lost at process exit only costs latency: consumers' slow poll finds the job.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any

import redis

log = logging.getLogger(__name__)


class Waker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[int, tuple[Any, set[str]]] = {}
        self._pid = 0
        self._busy = False

    def wake(self, bus: Any, channel: str) -> None:
        with self._cond:
            if self._pid != os.getpid():
                # First use in this process (or after a fork): own thread.
                self._pid = os.getpid()
                self._pending = {}
                self._busy = False
                threading.Thread(target=self._run, name="pinlater-waker", daemon=True).start()
            self._pending.setdefault(id(bus), (bus, set()))[1].add(channel)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                batch, self._pending = self._pending, {}
                self._busy = True
            for bus, channels in batch.values():
                try:
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
