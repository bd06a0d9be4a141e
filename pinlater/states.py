"""Job states; the integer values are the wire values of PinLaterJobState."""

from __future__ import annotations

from enum import IntEnum


class JobState(IntEnum):
    PENDING = 0
    RUNNING = 1  # IN_PROGRESS on the wire
    SUCCEEDED = 2
    FAILED = 3

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)

    @classmethod
    def parse(cls, value: str | int | JobState) -> JobState:
        """Accept 'pending', 'PENDING', 'in_progress', 0, JobState.PENDING."""
        if isinstance(value, JobState):
            return value
        if isinstance(value, int):
            return cls(value)
        name = value.strip().upper()
        if name == "IN_PROGRESS":
            name = "RUNNING"
        if name.isdigit():
            return cls(int(name))
        try:
            return cls[name]
        except KeyError:
            raise ValueError(
                f"unknown job state {value!r}: use pending, running, succeeded or failed"
            ) from None
