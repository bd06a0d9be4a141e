"""Public request and result types of the job service (the in-process API)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from pinlater.states import JobState


@dataclass(frozen=True, slots=True)
class Job:
    """A job to enqueue. ``run_after_ms`` None means now (the shard's clock);
    ``attempts_allowed`` None means the queue retry policy's default (which
    counts the first run too)."""

    body: bytes
    priority: int = 1
    run_after_ms: int | None = None
    attempts_allowed: int | None = None
    custom_status: str = ""
    # The W3C traceparent the job's runs continue. None: the span current
    # at the enqueue when tracing is on (pinlater.observe.tracing), else no trace.
    trace: str | None = None
    # The fairness key (a tenant, a pinner, a backfill run: text of at most
    # MAX_KEY_BYTES bytes in UTF-8; "" none). Among the runnable jobs of a
    # priority, a dequeue serves keys in turn; jobs without a key share one
    # turn as if they had one key.
    key: str = ""
    # The unique key (text of at most MAX_UNIQUE_KEY_BYTES bytes in UTF-8;
    # "" none): while a job of the queue with this key is PENDING or RUNNING
    # (or SUCCEEDED less than the queue's ``unique_succeeded_ms`` ago), an
    # enqueue of another one stores nothing and answers that job's
    # descriptor (``Enqueued.duplicates``).
    unique: str = ""


class Enqueued(list[str]):
    """What an enqueue answers: the jobs' descriptors in order (a list of
    str); ``duplicates``: the indexes of the jobs that were not stored
    because a job of the same unique key holds it, whose descriptor is that
    job's (a job named twice in one call is a duplicate of the first)."""

    __slots__ = ("duplicates",)

    def __init__(self, descriptors: Iterable[str] = (), duplicates: Iterable[int] = ()) -> None:
        super().__init__(descriptors)
        self.duplicates: tuple[int, ...] = tuple(duplicates)


@dataclass(frozen=True, slots=True)
class DequeuedJob:
    """A claimed job. ``claim``: the claim it was dequeued under
    (``TOKEN@SOURCE``; "" from a dry run, or from a server that does not
    send claims), to give back in its ``Ack`` and ``Checkpoint``s;
    ``trace``: the traceparent stored with it (None: none);
    ``run_after_ms``: since when it was runnable, on its shard's clock
    (None: not known, e.g. from a server that does not say)."""

    descriptor: str
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    claim: str
    trace: str | None = None
    run_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """One job's ACK. ``retry_delay_ms`` applies to failures only: 0 means
    "use the queue's retry policy". ``claim``: the ``DequeuedJob.claim``
    the job was dequeued under; the ACK then applies only while the job
    still runs under exactly that claim, so a run's late ACK never settles
    a later run of the same job. None (or ""): it applies to a claim of
    the caller's source, whichever (see ``pinlater.stores.base``)."""

    descriptor: str
    append_custom_status: str = ""
    retry_delay_ms: int = 0
    claim: str | None = None


@dataclass(frozen=True, slots=True)
class AckResult:
    """Per descriptor, what an ACK or checkpoint call did: ``acked`` were
    applied; ``stale`` changed nothing (the caller no longer holds the
    claim); ``unapplied`` (descriptor -> cause) were not tried because their
    shard could not be reached: retry only those. ``cancelled`` (checkpoints
    only): those of ``stale`` whose job was cancelled (``cancel``): the run
    should stop."""

    acked: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    unapplied: dict[str, str] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)


# The custom status a cancel appends to the jobs it ends.
CANCELLED_STATUS = "[cancelled]"


@dataclass
class CancelResult:
    """Per descriptor, what a cancel did: ``cancelled`` were PENDING and
    will never run; ``interrupted`` were RUNNING and ended then (the worker
    is told at its next heartbeat or checkpoint, and its ACK is stale);
    ``finished`` had ended already, and nothing changed; ``unknown`` name no
    job; ``unapplied`` (descriptor -> cause) were not tried because their
    shard could not be reached: retry only those. Every cancelled or
    interrupted job is FAILED, its custom status ending ``[cancelled]``."""

    cancelled: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    unapplied: dict[str, str] = field(default_factory=dict)


def new_batch_id(callback_queue: str) -> str:
    """A new batch's id: its callback's queue, ".b" and 24 lowercase hex
    digits (96 random bits), for ``create_batch(..., batch=)`` by a caller
    that must know it first. A batch belongs to its callback's queue: who
    may touch that queue may touch the batch."""
    return f"{callback_queue}.b{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """A batch (``create_batch``): ``state`` is "open" (its maker may add
    jobs; not sealed), "sealed" (jobs still to end), "complete" (every job
    ended; its callback about to be released), "released" (the callback is
    due to run) or "cancelled"; ``total`` jobs, of which ``succeeded`` and
    ``failed`` have ended (a job deleted before it ended counts as failed);
    ``callback``: the callback job's descriptor."""

    batch: str
    state: str
    total: int
    succeeded: int
    failed: int
    callback: str
    description: str
    created_at_ms: int
    updated_at_ms: int

    @property
    def pending(self) -> int:
        """Jobs not ended yet."""
        return self.total - self.succeeded - self.failed


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Heartbeat for a running job, optionally changing it. With
    ``move_to_pending`` the job goes back to PENDING (run_after as given or
    now) without spending an attempt. ``claim``: as ``Ack.claim``."""

    descriptor: str
    new_body: bytes | None = None
    move_to_pending: bool = False
    run_after_ms: int | None = None
    attempts_allowed: int | None = None
    prepend_custom_status: str | None = None
    claim: str | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as lookups and scans show it. ``claim``: while RUNNING, the
    source that holds its claim (never the claim's token, which is what an
    ACK proves it holds the claim with); None in every other state."""

    descriptor: str
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int
    updated_at_ms: int
    claim: str | None
    body: bytes | None
    key: str = ""  # the job's fairness key ("" none)


@dataclass(frozen=True, slots=True)
class ScanResult:
    jobs: list[JobInfo]
    continuation: str  # CONTINUATION_END when there is nothing more


CONTINUATION_START = "0"
CONTINUATION_END = "-1"
