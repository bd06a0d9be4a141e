"""Per-queue configuration, shared by every process through the control store."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from pinlater.errors import QueueNameInvalid, QueueNameTooLong
from pinlater.retry import DEFAULT_RETRY_POLICY, RetryPolicy

# MySQL keeps one table per (queue, priority) named q_<queue>_p<N>: within
# the 64-character identifier limit with room to spare.
QUEUE_NAME_MAX = 50
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_]+$")

DAY_MS = 86_400_000


def validate_queue_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise QueueNameInvalid("queue name must be a non-empty string")
    if len(name) > QUEUE_NAME_MAX:
        raise QueueNameTooLong(
            f"queue name {name[:60]!r}... is {len(name)} characters; the limit is {QUEUE_NAME_MAX}"
        )
    if not _QUEUE_NAME.match(name):
        raise QueueNameInvalid(
            f"queue name {name!r} is invalid: use letters, digits and underscore only"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    priorities: int = 3
    # Jobs per second across every dequeuer together; None is unlimited.
    max_dequeue_rate: float | None = None
    paused: bool = False
    claim_timeout_ms: int = 300_000
    retry: RetryPolicy = field(default_factory=lambda: DEFAULT_RETRY_POLICY)
    succeeded_retention_ms: int = DAY_MS
    failed_retention_ms: int = 7 * DAY_MS

    def __post_init__(self) -> None:
        validate_queue_name(self.name)
        if not 1 <= self.priorities <= 100:
            raise ValueError("priorities must be between 1 and 100")
        if self.max_dequeue_rate is not None and self.max_dequeue_rate < 0:
            raise ValueError("max_dequeue_rate must be >= 0 (0 pauses) or None for unlimited")
        if self.claim_timeout_ms < 100:
            raise ValueError("claim_timeout_ms must be at least 100")
        if self.succeeded_retention_ms < 0 or self.failed_retention_ms < 0:
            raise ValueError("retention must be >= 0")

    @property
    def effective_rate(self) -> float | None:
        """The rate the limiter enforces: 0 while paused, None if unlimited."""
        return 0.0 if self.paused else self.max_dequeue_rate

    def with_changes(self, **changes: Any) -> QueueConfig:
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "priorities": self.priorities,
                "max_dequeue_rate": self.max_dequeue_rate,
                "paused": self.paused,
                "claim_timeout_ms": self.claim_timeout_ms,
                "retry": self.retry.to_dict(),
                "succeeded_retention_ms": self.succeeded_retention_ms,
                "failed_retention_ms": self.failed_retention_ms,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> QueueConfig:
        data = json.loads(text)
        data["retry"] = RetryPolicy.from_dict(data.get("retry") or {})
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)
