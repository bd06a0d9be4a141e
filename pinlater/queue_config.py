"""Per-queue configuration, shared by every process through the control store."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from pinlater.errors import ConfigUnreadable, QueueNameInvalid, QueueNameTooLong
from pinlater.limits import MAX_DEQUEUE_RATE, MAX_DURATION_MS, MAX_PRIORITIES, MAX_RUNNING_CAP, MIN_DEQUEUE_RATE
from pinlater.retry import DEFAULT_RETRY_POLICY, RetryPolicy

log = logging.getLogger(__name__)

# MySQL keeps one table per (queue, priority) named q_<queue>_p<N>: within
# the 64-character identifier limit with room to spare.
QUEUE_NAME_MAX = 50
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_]+")

DAY_MS = 86_400_000


def validate_queue_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise QueueNameInvalid("queue name must be a non-empty string")
    if len(name) > QUEUE_NAME_MAX:
        raise QueueNameTooLong(
            f"queue name {name[:60]!r}... is {len(name)} characters; the limit is {QUEUE_NAME_MAX}"
        )
    if not _QUEUE_NAME.fullmatch(name):
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
    # At most this many jobs RUNNING at once over every shard and process
    # (pinlater.engine.slots); None is no cap.
    max_running: int | None = None
    # Per fairness key (Job.key; jobs without one are not limited): at most
    # this many RUNNING at once (pinlater.engine.key_slots), and this many
    # dequeued per second (pinlater.engine.ratelimit), over every shard and
    # process; None is no limit.
    key_max_running: int | None = None
    key_rate: float | None = None
    # A unique key (Job.unique) stays taken this long after its job
    # SUCCEEDED; 0: it is free once the job ends.
    unique_succeeded_ms: int = 0
    # Jobs of the queue may be in batches: its ACKs tell their batches at
    # once (pinlater.engine.batches). Set when its first job joins one.
    batches: bool = False

    def __post_init__(self) -> None:
        validate_queue_name(self.name)
        if not _is_int(self.priorities) or not 1 <= self.priorities <= MAX_PRIORITIES:
            raise ValueError(f"priorities must be a whole number from 1 to {MAX_PRIORITIES}, got {self.priorities!r}")
        if check_rate(self.max_dequeue_rate) == 0:
            object.__setattr__(self, "max_dequeue_rate", 0.0)  # not -0.0, shown as such
        if not isinstance(self.paused, bool):
            raise ValueError("paused must be true or false")
        if not _is_int(self.claim_timeout_ms) or not 100 <= self.claim_timeout_ms <= MAX_DURATION_MS:
            raise ValueError(f"claim_timeout_ms must be from 100 to {MAX_DURATION_MS}, got {self.claim_timeout_ms!r}")
        for name in ("succeeded_retention_ms", "failed_retention_ms", "unique_succeeded_ms"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= MAX_DURATION_MS:
                raise ValueError(f"{name} must be from 0 to {MAX_DURATION_MS}, got {value!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise ValueError("retry must be a RetryPolicy")
        check_max_running(self.max_running)
        check_max_running(self.key_max_running, "key_max_running")
        check_key_rate(self.key_rate)
        if not isinstance(self.batches, bool):
            raise ValueError("batches must be true or false")

    @property
    def effective_rate(self) -> float | None:
        """The rate the limiter enforces: 0 while paused, None if unlimited."""
        return 0.0 if self.paused else self.max_dequeue_rate

    def with_changes(self, **changes: Any) -> QueueConfig:
        return replace(self, **changes)

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "name": self.name,
            "priorities": self.priorities,
            "max_dequeue_rate": self.max_dequeue_rate,
            "paused": self.paused,
            "claim_timeout_ms": self.claim_timeout_ms,
            "retry": self.retry.to_dict(),
            "succeeded_retention_ms": self.succeeded_retention_ms,
            "failed_retention_ms": self.failed_retention_ms,
        }
        # Written only when set: a queue without a cap is stored as before,
        # and read by an older version the same.
        for name in ("max_running", "key_max_running", "key_rate"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.unique_succeeded_ms:
            data["unique_succeeded_ms"] = self.unique_succeeded_ms
        if self.batches:
            data["batches"] = True
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> QueueConfig:
        """Reads a stored config. A rate that today's validation refuses but
        an older version stored (NaN, Infinity, negative) is read as what it
        did then, unlimited, with a warning, so the queue stays usable."""
        data = json.loads(text)
        data["retry"] = RetryPolicy.from_dict(data.get("retry") or {})
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        rate = known.get("max_dequeue_rate")
        if rate is not None:
            try:
                check_rate(rate)
            except ValueError as exc:
                if _below_floor(rate):
                    log.warning("queue %s: stored rate %r read as the slowest, %g jobs/s",
                                known.get("name"), rate, MIN_DEQUEUE_RATE)
                    known["max_dequeue_rate"] = MIN_DEQUEUE_RATE
                else:
                    log.warning("queue %s: stored rate ignored, treated as unlimited: %s", known.get("name"), exc)
                    known["max_dequeue_rate"] = None
        if _below_floor(known.get("key_rate")):
            known["key_rate"] = MIN_DEQUEUE_RATE
        return cls(**known)


def _below_floor(rate: object) -> bool:
    """A rate above 0 but below MIN_DEQUEUE_RATE, as versions before the
    floor stored: read as the floor, the nearest rate that means the same."""
    return (isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate)
            and 0 < rate < MIN_DEQUEUE_RATE)


# What from_json may raise on a damaged text (JSONDecodeError and
# UnicodeDecodeError are ValueErrors).
CONFIG_PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


def read_stored_config(name: str, text: str | bytes) -> QueueConfig:
    """A config as a control store holds it; StorageError if it cannot be read."""
    try:
        return QueueConfig.from_json(text)
    except CONFIG_PARSE_ERRORS as exc:
        raise ConfigUnreadable(
            f"the stored config of queue {name!r} cannot be read ({type(exc).__name__}: {str(exc)[:200]}); "
            "no change can be made to it until it is repaired in the control store"
        ) from None


def read_stored_configs(texts: dict[str, str | bytes]) -> dict[str, QueueConfig]:
    """Every readable config. One damaged config is logged and left out, so
    that it never hides the other queues (from the monitor, for one)."""
    configs: dict[str, QueueConfig] = {}
    for name, text in texts.items():
        try:
            configs[name] = read_stored_config(name, text)
        except ConfigUnreadable as exc:
            log.error("%s", exc.message)
    return configs


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_rate(rate: object) -> float | None:
    """A max dequeue rate: None (unlimited), 0 (paused), or a finite number
    of jobs per second from MIN_DEQUEUE_RATE to MAX_DEQUEUE_RATE."""
    if rate is None:
        return None
    if (
        not isinstance(rate, int | float)
        or isinstance(rate, bool)
        or not math.isfinite(rate)
        or not (rate == 0 or MIN_DEQUEUE_RATE <= rate <= MAX_DEQUEUE_RATE)
    ):
        raise ValueError(
            f"max_dequeue_rate must be a finite number of jobs per second, 0 (pauses) or from "
            f"{MIN_DEQUEUE_RATE:g} to {MAX_DEQUEUE_RATE:g}, or unlimited; got {str(rate)[:40]!r}"
        )
    return float(rate)


def check_max_running(cap: object, name: str = "max_running") -> int | None:
    """A concurrency cap (``name``: the queue's, or per key): None (no cap)
    or a whole number of jobs from 1 to MAX_RUNNING_CAP (pause a queue to
    run none)."""
    if cap is None:
        return None
    if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= MAX_RUNNING_CAP:
        raise ValueError(
            f"{name} must be a whole number of jobs from 1 to {MAX_RUNNING_CAP}, or unlimited "
            f"(pause the queue to run none); got {str(cap)[:40]!r}"
        )
    return cap


def check_key_rate(rate: object) -> float | None:
    """Dequeues per second per fairness key: None (unlimited), or a finite
    number from MIN_DEQUEUE_RATE to MAX_DEQUEUE_RATE (a key is not paused
    alone)."""
    if rate is None:
        return None
    if (
        not isinstance(rate, int | float)
        or isinstance(rate, bool)
        or not math.isfinite(rate)
        or not MIN_DEQUEUE_RATE <= rate <= MAX_DEQUEUE_RATE
    ):
        raise ValueError(
            f"key_rate must be a finite number of jobs per second per key from {MIN_DEQUEUE_RATE:g} to "
            f"{MAX_DEQUEUE_RATE:g}, or unlimited; got {str(rate)[:40]!r}"
        )
    return float(rate)
