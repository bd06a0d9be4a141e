"""Per-queue dequeue rate limits, shared by every dequeuing process.

The token bucket lives in the control store, so the limit holds across all
processes together. If the control store cannot be reached (or refuses
writes, its disk full), each process
falls back to a bucket of its own at the full rate (the cluster may then
exceed the limit by the number of processes) rather than stopping work: an
outage of the control store must not become an outage of every queue.

A queue's ``key_rate`` is the same kind of bucket per fairness key
(``key_bucket``), taken for the keys a dequeue is about to serve
(``ShardBackend.lane_keys``) and handed to the shards as allowances.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from pinlater.engine.control_backoff import ControlBackoff
from pinlater.errors import DequeueRateLimited, ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.stores.base import ShardWriteRefused
from pinlater.stores.control import ControlStore, TokenBuckets

T = TypeVar("T")


def key_bucket(queue: str, key: str) -> str:
    """The rate bucket of one fairness key of a queue (queue names have no
    '/', so it is never a queue's own)."""
    return f"{queue}/key/{key}"


class RateLimiter:
    def __init__(self, control: ControlStore, burst_s: float, backoff: ControlBackoff | None = None) -> None:
        self._control = control
        self._burst_s = burst_s
        self._local = TokenBuckets()
        # While the control store fails, the local buckets at once (ControlBackoff).
        self._backoff = backoff or ControlBackoff()

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
        granted = self._shared(
            lambda: self._control.acquire(config.name, wanted, rate, self.burst(rate)),
            lambda: self._local.acquire(config.name, wanted, rate, self.burst(rate)),
        )
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
        self._shared(
            lambda: self._control.release(config.name, unused, self.burst(rate)),
            lambda: self._local.release(config.name, unused, self.burst(rate)),
        )

    def take_keys(self, config: QueueConfig, keys: list[str], wanted: int) -> dict[str, int]:
        """Per key, tokens for up to ``wanted`` of its jobs (0 when its
        bucket is empty) under the queue's ``key_rate``."""
        rate = config.key_rate
        assert rate is not None, "take_keys() is for queues with a key rate"
        burst = self.burst(rate)
        buckets = [key_bucket(config.name, key) for key in keys]
        granted = self._shared(
            lambda: self._control.acquire_many(buckets, wanted, rate, burst),
            lambda: [self._local.acquire(b, wanted, rate, burst) for b in buckets],
        )
        return dict(zip(keys, granted, strict=True))

    def give_back_keys(self, config: QueueConfig, unused: dict[str, int]) -> None:
        """Return the key tokens a dequeue took but did not use."""
        rate = config.key_rate
        if rate is None:
            return
        burst = self.burst(rate)
        counts = {key_bucket(config.name, key): n for key, n in unused.items() if n > 0}
        def local() -> None:
            for bucket, n in counts.items():
                self._local.release(bucket, n, burst)

        self._shared(lambda: self._control.release_many(counts, burst), local)

    def _shared(self, shared: Callable[[], T], local: Callable[[], T]) -> T:
        """``shared`` (the control store's buckets), or ``local`` while it
        cannot be reached."""
        if self._backoff.skip():
            return local()
        try:
            result = shared()
        except (ShardConnectionFailed, ShardWriteRefused) as exc:
            # Refusing writes (a full disk) takes no token either.
            self._backoff.failed(exc)
            return local()
        self._backoff.ok()
        return result
