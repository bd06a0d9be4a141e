"""The in-memory shard's job rows, and the rules on them that the server
stores keep in their own scripts and statements: what holds a unique key,
and how a custom status grows."""

from __future__ import annotations

from dataclasses import dataclass

from pinlater.states import JobState
from pinlater.stores.base import CUSTOM_STATUS_MAX, ClaimedJob, JobRecord


@dataclass(slots=True)
class Row:
    local_id: int
    priority: int
    state: JobState
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at: int
    run_after: int
    updated_at: int
    claim: str | None
    trace: str | None = None
    key: str = ""

    def record(self, include_body: bool) -> JobRecord:
        return JobRecord(
            local_id=self.local_id,
            priority=self.priority,
            state=self.state,
            attempts_allowed=self.attempts_allowed,
            attempts_remaining=self.attempts_remaining,
            custom_status=self.custom_status,
            created_at_ms=self.created_at,
            run_after_ms=self.run_after,
            updated_at_ms=self.updated_at,
            claim=self.claim,
            body=self.body if include_body else None,
            key=self.key,
        )

    def claimed(self, claim: str) -> ClaimedJob:
        return ClaimedJob(
            self.local_id, self.priority, self.body, self.attempts_allowed,
            self.attempts_remaining, claim, self.trace, self.run_after, self.key,
        )

    @property
    def sort_time(self) -> int:
        return self.run_after if self.state is JobState.PENDING else self.updated_at


def holds_unique(row: Row, now: int, succeeded_ms: int) -> bool:
    """Whether a job holds its unique key: PENDING or RUNNING, or SUCCEEDED
    less than ``succeeded_ms`` ago."""
    if row.state is JobState.PENDING or row.state is JobState.RUNNING:
        return True
    return row.state is JobState.SUCCEEDED and now - row.updated_at < succeeded_ms


def append_status(status: str, extra: str) -> str:
    return (status + extra)[-CUSTOM_STATUS_MAX:] if extra else status


def prepend_status(status: str, extra: str | None) -> str:
    return (extra + status)[:CUSTOM_STATUS_MAX] if extra else status
