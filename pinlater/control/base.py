"""What every control store provides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from pinlater.queue_config import QueueConfig


@runtime_checkable
class ControlStore(Protocol):
    def get_queue(self, name: str) -> QueueConfig | None:
        """The queue's config, or None if no such queue."""

    def list_queues(self) -> dict[str, QueueConfig]:
        """Every queue's config by name."""

    def queue_config_texts(self) -> dict[str, str | bytes]:
        """Every queue's config as stored, unparsed: for tools (the
        dashboard) that must show a queue even when its config cannot be read."""

    def create_queue(self, config: QueueConfig) -> bool:
        """Store ``config`` unless the queue exists. True if created."""

    def put_queue(self, config: QueueConfig) -> None:
        """Store ``config``, replacing any existing one."""

    def delete_queue(self, name: str) -> None:
        """Forget the queue's config and its rate bucket. Idempotent."""

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        """Token bucket shared by every process, on the store's clock: refill
        at ``rate`` tokens/s up to ``burst``, then take up to ``wanted``
        whole tokens. Returns how many were taken (0..wanted). A bucket that
        does not exist yet starts full."""

    def release(self, bucket: str, count: int, burst: float) -> None:
        """Give back ``count`` unused tokens (never above ``burst``)."""

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        """Idempotent enqueue, step 1: mark ``key`` as being enqueued for
        ``ttl_ms`` unless it is already known (reserved or remembered).
        True if this call took it. Atomic across processes."""

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        """Store the descriptors an enqueue with ``key`` created, for
        ``ttl_ms`` (replacing the reservation)."""

    def recall_enqueue(self, key: str) -> list[str] | None:
        """The remembered descriptors; [] while the key is only reserved;
        None if the key is unknown or expired."""

    def forget_enqueue(self, key: str) -> None:
        """Drop a reservation (the enqueue failed) or remembered key."""

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Add ``counts[queue][event]`` to the minute ``minute`` (minutes
        since the epoch). Every process adds into the same buckets."""

    def read_counts(self, since_minute: int, until_minute: int) -> dict[int, dict[str, dict[str, int]]]:
        """minute -> queue -> event -> count, for minutes in the range."""

    def close(self) -> None:
        """Release connections."""
