"""What every control store provides."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pinlater.queue_config import QueueConfig


@runtime_checkable
class ControlStore(Protocol):
    def get_queue(self, name: str) -> QueueConfig | None:
        """The queue's config, or None if no such queue."""

    def list_queues(self) -> dict[str, QueueConfig]:
        """Every queue's config by name."""

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

    def close(self) -> None:
        """Release connections."""
