"""Per-queue dequeue rate limits, shared by every dequeuing process.

The token bucket lives in the control store, so the limit holds across all
processes together. If the control store cannot be reached, each process
falls back to a bucket of its own at the full rate (the cluster may then
exceed the limit by the number of processes) rather than stopping work: an
outage of the control store must not become an outage of every queue.
"""

from __future__ import annotations

import logging
import math

from pinlater.errors import DequeueRateLimited, ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.stores.control import ControlStore, TokenBuckets

log = logging.getLogger(__name__)


class RateLimiter:
    def __init__(self, control: ControlStore, burst_s: float) -> None:
        self._control = control
        self._burst_s = burst_s
        self._local = TokenBuckets()

    def burst(self, rate: float) -> float:
        # At least one whole token, or a slow queue could never be granted any.
        return max(1.0, rate * self._burst_s)

    def take(self, config: QueueConfig, wanted: int) -> int:
        """Tokens for up to ``wanted`` dequeues; raises DequeueRateLimited when
        none are available now (or the queue is paused)."""
        rate = config.effective_rate
        if rate is None:
            return wanted
        if rate <= 0:
            raise DequeueRateLimited(f"queue {config.name!r} is paused", retry_after_ms=1000)
        try:
            granted = self._control.acquire(config.name, wanted, rate, self.burst(rate))
        except ShardConnectionFailed as exc:
            log.warning("control store unreachable, rate-limiting %s locally: %s", config.name, exc)
            granted = self._local.acquire(config.name, wanted, rate, self.burst(rate))
        if granted <= 0:
            raise DequeueRateLimited(
                f"queue {config.name!r} is limited to {rate:g} jobs/s",
                retry_after_ms=max(1, math.ceil(1000 / rate)),
            )
        return granted

    def give_back(self, config: QueueConfig, unused: int) -> None:
        """Return tokens a dequeue took but found no jobs for."""
        rate = config.effective_rate
        if rate is None or rate <= 0 or unused <= 0:
            return
        try:
            self._control.release(config.name, unused, self.burst(rate))
        except ShardConnectionFailed:
            self._local.release(config.name, unused, self.burst(rate))
