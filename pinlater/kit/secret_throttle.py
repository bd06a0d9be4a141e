"""Limits on guessing a secret: the admin secret (deleteQueue's password),
and the dashboard's operator token.

Wrong secrets are counted over a sliding window, per caller (a Thrift
client's certificate identity or address, ``pinlater.engine.caller``) and for the
whole process. A caller with ``per_caller`` wrong secrets in the last
``window_s`` seconds, or any caller once the process has seen
``per_process`` of them, is refused without its secret being looked at
until the oldest of those leaves the window. A refusal costs a dictionary
look-up: no hashing, no store call. A right secret clears its caller's
count (not the process's). The throttle logs at most one line a second,
naming callers, never what they sent.

The process-wide count bounds the per-caller table too: a wrong secret is
counted only while the process is under ``per_process``, so no more
callers than that have one within the window.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from pinlater.errors import PasswordInvalid

log = logging.getLogger(__name__)


class SecretThrottle:
    def __init__(self, per_caller: int, per_process: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic, *, what: str = "admin secret") -> None:
        self.what = what
        # One caller's allowance is within the process's.
        self.per_caller, self.per_process, self.window_s = min(per_caller, per_process), per_process, window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._callers: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=per_process)
        self._logged_at = -math.inf
        self._unlogged = 0

    def check(self, caller: str) -> None:
        """Raises PasswordInvalid, in one line, if ``caller`` may not try
        a secret now; call it before looking at the secret."""
        now = self._clock()
        with self._lock:
            mine = self._callers.get(caller)
            caller_wait = self._wait(mine, self.per_caller, now)
            process_wait = self._wait(self._all, self.per_process, now)
        wait = max(caller_wait, process_wait)
        if wait <= 0:
            return
        who = f"from {caller!r}" if caller_wait >= process_wait else "on this server"
        self._log(now, "%s: refused an attempt of %r without checking it (too many wrong ones %s)",
                  self.what, caller, who)
        raise PasswordInvalid(f"too many wrong {self.what}s {who}: refused without checking, "
                              f"for {math.ceil(wait)} s more")

    def failed(self, caller: str) -> None:
        """Counts a wrong secret of ``caller``."""
        now = self._clock()
        with self._lock:
            mine = self._callers.get(caller)
            if mine is None:
                if len(self._callers) >= 2 * self.per_process:
                    self._forget_idle(now)
                mine = self._callers[caller] = deque(maxlen=self.per_caller)
            mine.append(now)
            self._all.append(now)
            recent = sum(1 for t in mine if t > now - self.window_s)
        self._log(now, "%s: a wrong one from %r (%d in the last %g s)", self.what, caller, recent, self.window_s)

    def succeeded(self, caller: str) -> None:
        with self._lock:
            self._callers.pop(caller, None)

    @property
    def callers_counted(self) -> int:
        """Callers whose wrong secrets are remembered now."""
        with self._lock:
            return len(self._callers)

    def _wait(self, failures: deque[float] | None, limit: int, now: float) -> float:
        """Seconds until ``failures`` hold fewer than ``limit`` in the window."""
        if failures is None or len(failures) < limit:
            return 0.0
        return failures[-limit] + self.window_s - now

    def _forget_idle(self, now: float) -> None:
        for name in [n for n, times in self._callers.items() if times[-1] <= now - self.window_s]:
            del self._callers[name]

    def _log(self, now: float, message: str, *args: object) -> None:
        """One line a second at most: a guesser in a loop must not fill the log."""
        with self._lock:
            if now - self._logged_at < 1.0:
                self._unlogged += 1
                return
            self._logged_at, unlogged, self._unlogged = now, self._unlogged, 0
        if unlogged:
            message += f" ({unlogged} more attempts since the last line)"
        log.warning(message, *args)
