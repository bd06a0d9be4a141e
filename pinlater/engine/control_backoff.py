"""When the hot paths stop asking a failing control store for a while.

Every enqueue, dequeue and ACK reads its queue's config (cached for
``config_ttl_s``), and every dequeue of a rate-limited queue takes tokens
from the control store. Both can do without it: the last known config, a
bucket of the process's own. But a control store cut off by the network
answers nothing: each call would wait out the store timeout before falling
back, so a silent control store made every call of the job service take a
timeout, and a rate-limited dequeue three.

So after a failure those paths use their fallback at once, and one call
(not every caller) tries the control store again after a pause that grows
from ``first_s`` to ``most_s`` while it keeps failing; the first success
ends it. What cannot do without the control store (caps, unique keys,
idempotency keys, batches, queue changes) still asks it, and fails.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class ControlBackoff:
    def __init__(self, first_s: float = 0.5, most_s: float = 5.0) -> None:
        self._first_s = first_s
        self._most_s = most_s
        self._lock = threading.Lock()
        self._pause_s = 0.0  # 0: the control store answered last time
        self._until = 0.0

    def skip(self) -> bool:
        """True: use the fallback without asking. False: ask (the one
        caller whose turn it is to try again, while the store is failing)."""
        if self._pause_s == 0.0:
            return False
        with self._lock:
            now = time.monotonic()
            if self._pause_s == 0.0:
                return False
            if now < self._until:
                return True
            # This caller tries; the others keep skipping until it is back.
            self._until = now + self._pause_s
            return False

    def failed(self, error: object) -> None:
        with self._lock:
            first = self._pause_s == 0.0
            self._pause_s = self._first_s if first else min(self._pause_s * 2, self._most_s)
            self._until = time.monotonic() + self._pause_s
        if first:
            log.warning("control store failing: cached queue configs and local rate limits until it answers "
                        "(tried again after %.1f s, then less often): %s", self._first_s, error)

    def ok(self) -> None:
        if self._pause_s == 0.0:
            return
        with self._lock:
            back = self._pause_s != 0.0
            self._pause_s = self._until = 0.0
        if back:
            log.warning("control store answers again: queue configs and rate limits from it")
