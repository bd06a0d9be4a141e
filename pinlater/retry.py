"""Retry policies: pure values, one delay function.

The default follows PinLater's: 10 retries, the first 5 with a linear delay,
the rest with exponential backoff, which rides out most sustained outages of
a downstream system without an operator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from pinlater.limits import MAX_DELAY_MS

# attempts_allowed is at most 1000 (pinlater.validation.MAX_ATTEMPTS).
MAX_RETRIES = 999


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``kind`` is one of constant, linear, exponential,
    linear_then_exponential, custom.

    ``retries`` is how many retries a job gets when its enqueue does not say
    (so attempts_allowed = retries + 1). ``delay_ms(n)`` is the wait before
    retry number n (1 = the first retry)."""

    kind: str = "linear_then_exponential"
    retries: int = 10
    base_ms: int = 30_000
    linear_retries: int = 5
    factor: float = 2.0
    max_delay_ms: int = 6 * 3600 * 1000
    delays_ms: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown retry policy kind {self.kind!r}: use one of {sorted(_KINDS)}")
        for name in ("retries", "base_ms", "linear_retries", "max_delay_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retries must be 0 to {MAX_RETRIES}")
        if not 0 <= self.linear_retries <= MAX_RETRIES:
            raise ValueError(f"linear_retries must be 0 to {MAX_RETRIES}")
        delays = (self.base_ms, self.max_delay_ms, *self.delays_ms)
        if any(not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= MAX_DELAY_MS for d in delays):
            raise ValueError(f"delays must be whole milliseconds from 0 to {MAX_DELAY_MS} (100 years)")
        if not isinstance(self.factor, int | float) or not math.isfinite(self.factor) or not 1.0 <= self.factor <= 100:
            raise ValueError(f"factor must be a finite number from 1 to 100, got {self.factor!r}")
        if self.kind == "custom" and not self.delays_ms:
            raise ValueError("a custom retry policy needs delays_ms")

    @property
    def attempts_allowed(self) -> int:
        return self.retries + 1

    def delay_ms(self, retry_number: int) -> int:
        return backoff_delay_ms(self, retry_number)

    def delay_table(self) -> tuple[int, ...]:
        """``delay_ms(n)`` for n = 1, 2, ... as a table whose last entry
        repeats for every larger n: what a backend needs to pick a failed
        job's delay inside its failure transition, from the job's own
        attempt count (no read before the write)."""
        return delay_table(self)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["delays_ms"] = list(self.delays_ms)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetryPolicy:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "delays_ms" in known:
            known["delays_ms"] = tuple(int(d) for d in known["delays_ms"])
        return cls(**known)

    @classmethod
    def constant(cls, delay_ms: int, retries: int = 10) -> RetryPolicy:
        return cls(kind="constant", base_ms=delay_ms, retries=retries)

    @classmethod
    def linear(cls, step_ms: int, retries: int = 10) -> RetryPolicy:
        return cls(kind="linear", base_ms=step_ms, retries=retries)

    @classmethod
    def exponential(
        cls, base_ms: int, retries: int = 10, factor: float = 2.0, max_delay_ms: int = 6 * 3600 * 1000
    ) -> RetryPolicy:
        return cls(
            kind="exponential", base_ms=base_ms, retries=retries, factor=factor, max_delay_ms=max_delay_ms
        )

    @classmethod
    def custom(cls, delays_ms: list[int] | tuple[int, ...], retries: int | None = None) -> RetryPolicy:
        delays = tuple(delays_ms)
        return cls(kind="custom", delays_ms=delays, retries=len(delays) if retries is None else retries)


_KINDS = {"constant", "linear", "exponential", "linear_then_exponential", "custom"}


def backoff_delay_ms(policy: RetryPolicy, retry_number: int) -> int:
    """Delay before retry ``retry_number`` (1-based), capped at max_delay_ms."""
    n = max(1, min(retry_number, MAX_RETRIES + 1))
    try:
        delay = _raw_delay(policy, n)
    except OverflowError:  # factor ** n past a double: the cap applies
        delay = math.inf
    return int(min(delay, policy.max_delay_ms))


# Bounded: every queue config carries its own policy, and a long-lived
# server that sees many (an operator trying values) must not keep them all.
@lru_cache(maxsize=256)
def delay_table(policy: RetryPolicy) -> tuple[int, ...]:
    """See RetryPolicy.delay_table: a pure function of the policy, so
    computed once per policy seen lately. Trailing repeats are trimmed (a capped policy
    has a short table; the longest is MAX_RETRIES + 1 entries)."""
    delays = [backoff_delay_ms(policy, n) for n in range(1, MAX_RETRIES + 2)]
    while len(delays) > 1 and delays[-2] == delays[-1]:
        delays.pop()
    return tuple(delays)


def _raw_delay(policy: RetryPolicy, n: int) -> float:
    if policy.kind == "constant":
        delay = float(policy.base_ms)
    elif policy.kind == "linear":
        delay = float(policy.base_ms * n)
    elif policy.kind == "exponential":
        delay = policy.base_ms * policy.factor ** (n - 1)
    elif policy.kind == "linear_then_exponential":
        if n <= policy.linear_retries:
            delay = float(policy.base_ms * n)
        else:
            last_linear = policy.base_ms * max(1, policy.linear_retries)
            delay = last_linear * policy.factor ** (n - policy.linear_retries)
    else:  # custom: the last delay repeats past the end of the list
        delay = float(policy.delays_ms[min(n, len(policy.delays_ms)) - 1])
    return delay


DEFAULT_RETRY_POLICY = RetryPolicy()
