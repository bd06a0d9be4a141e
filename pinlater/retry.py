"""Retry policies: pure values, one delay function.

The default follows PinLater's: 10 retries, the first 5 with a linear delay,
the rest with exponential backoff, which rides out most sustained outages of
a downstream system without an operator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.base_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("delays must be >= 0")
        if self.factor < 1.0:
            raise ValueError("factor must be >= 1")
        if self.kind == "custom" and not self.delays_ms:
            raise ValueError("a custom retry policy needs delays_ms")
        if any(d < 0 for d in self.delays_ms):
            raise ValueError("delays must be >= 0")

    @property
    def attempts_allowed(self) -> int:
        return self.retries + 1

    def delay_ms(self, retry_number: int) -> int:
        return backoff_delay_ms(self, retry_number)

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
    n = max(1, retry_number)
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
    return int(min(delay, policy.max_delay_ms))


DEFAULT_RETRY_POLICY = RetryPolicy()
