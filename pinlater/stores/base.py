"""The per-shard storage contract.

One ``ShardBackend`` object is one shard: one Redis server/db or one MySQL
database. The job service above it validates input, picks shards, applies
retry policies and rate limits; a backend only stores and makes each
transition atomically on its shard, guarded by the state it expects.

Conventions every backend follows:

* Times are milliseconds since the epoch from the *shard's own clock*
  (Redis ``TIME`` inside the script, MySQL ``NOW(3)``); ``None`` for a time
  argument means "now" on that clock.
* Jobs live per (queue, priority); ``local_id`` is unique within
  (shard, queue, priority) and increases with enqueue order.
* Every job has a *sort time* used by scans and age-based operations:
  ``run_after_ms`` while PENDING, ``updated_at_ms`` in every other state
  (claim/heartbeat time while RUNNING, finish time when terminal).
* A claim string is ``TOKEN@SOURCE`` where TOKEN is exactly 16 lowercase hex
  chars, new for each dequeue call; ``claim[17:]`` is the claimer's source.
  ACKs and checkpoints apply only while the job is RUNNING under the
  item's claim: exactly ``item.claim`` when the item gives one (whatever
  its source), else any claim whose source equals ``item.source`` (a
  client that does not send claims). Otherwise they change nothing and are
  reported stale (``False``). See ``holds``.
* ``custom_status`` is capped at ``CUSTOM_STATUS_MAX`` characters: appends
  keep the newest (rightmost) characters, prepends keep the leftmost.
* Storage failures propagate: connection problems as
  ``ShardUnavailable``, a shard that answers but refuses writes as
  ``ShardWriteRefused``, anything else as the driver's exception or
  ``StorageError``. Nothing is swallowed.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pinlater.errors import ShardConnectionFailed, StorageError
from pinlater.states import JobState

CUSTOM_STATUS_MAX = 4000
CLAIM_TOKEN_LEN = 16
# A claim token's first characters name who claimed it when a capped
# queue's dequeue chose it (``pinlater.engine.slots``): its slots' owner.
CLAIM_OWNER_LEN = 8


def new_claim_token(token: str | None) -> str:
    """A claim's TOKEN: ``token`` (16 lowercase hex digits) as given, or a
    new random one."""
    if token is None:
        return secrets.token_hex(CLAIM_TOKEN_LEN // 2)
    if len(token) != CLAIM_TOKEN_LEN or token.strip("0123456789abcdef"):
        raise ValueError("a claim token is 16 lowercase hex digits")
    return token


class ShardUnavailable(ShardConnectionFailed):
    """The shard could not be reached (refused, reset, timed out)."""


class ShardOutcomeUnknown(ShardUnavailable):
    """The shard stopped answering after the request was sent (a read
    timed out, the connection dropped while a commit was under way): the
    request may have been applied. Still an outage for the shard set."""


class ShardBusy(StorageError):
    """The shard is fine but this process has no free connection to it right
    now: load, not an outage, so it never takes the shard out of rotation."""


class ShardWriteRefused(StorageError):
    """The shard answers but refuses to write (Redis OOM, READONLY, MISCONF,
    NOREPLICAS; MySQL read-only or full): nothing was written. Every
    transition is a write, so the shard is out of rotation until a probe's
    write succeeds (``ShardBackend.probe``)."""


# Not frozen, the two carriers made for every job that passes: a frozen
# dataclass's __init__ sets each field through object.__setattr__, about a
# tenth of a microsecond a field here.
@dataclass(slots=True)
class EnqueueItem:
    body: bytes
    priority: int
    run_after_ms: int | None  # None: now
    attempts_allowed: int  # >= 1, counts the first run
    custom_status: str
    trace: str | None = None  # W3C traceparent the job continues (pinlater.observe.tracing)
    key: str = ""  # fairness key ("" none)
    unique: str = ""  # unique key ("" none): ShardBackend.enqueue_unique


@dataclass(frozen=True, slots=True)
class Existing:
    """``enqueue_unique``'s answer for an item whose unique key a job
    holds: that job, which may be of another priority."""

    priority: int
    local_id: int


@dataclass(slots=True)
class ClaimedJob:
    local_id: int
    priority: int
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    claim: str  # "" for a dry-run peek
    trace: str | None = None
    run_after_ms: int = 0  # since when it was runnable (0: not known)
    key: str = ""  # fairness key ("" none)


@dataclass(frozen=True, slots=True)
class AckItem:
    priority: int
    local_id: int
    source: str
    append_custom_status: str
    claim: str | None = None  # the exact claim it applies to (None: any of source's)


@dataclass(frozen=True, slots=True)
class FailItem:
    """A failure ACK. ``delay_ms`` None: the retry policy's delay, picked
    inside the transition from the delay table given to ``ack_failed`` by
    the job's retry number (attempts_allowed - attempts_remaining + 1; past
    the table's end its last entry). An explicit delay (the worker's own)
    wins."""

    priority: int
    local_id: int
    source: str
    append_custom_status: str
    delay_ms: int | None = None
    claim: str | None = None  # as AckItem's


@dataclass(frozen=True, slots=True)
class Claims:
    """What one dequeue (or peek) call got on its shard. ``next_priority``:
    when fewer than ``limit`` jobs were found, the first of the call's
    ``look_ahead`` priorities that has runnable jobs (None: none has, or the
    limit was met), so the caller knows where to go next without asking.
    ``stopped_at``: the key that ended a dequeue with allowances (None: none
    did)."""

    jobs: list[ClaimedJob]
    next_priority: int | None = None
    stopped_at: str | None = None


def keep_claimed(exc: BaseException, jobs: Sequence[ClaimedJob]) -> None:
    """Before a dequeue that had claimed ``jobs`` raises ``exc`` on: they
    go with the error to the caller (``claimed_before``), ahead of any
    claimed later. Dropped, they would stay RUNNING unheld until their
    claim timed out, spending an attempt, and a per-key cap would count
    their slots free meanwhile."""
    if jobs:
        exc.pinlater_claimed = [*jobs, *claimed_before(exc)]  # type: ignore[attr-defined]


def claimed_before(exc: BaseException) -> list[ClaimedJob]:
    """The jobs a dequeue had claimed when it failed with ``exc``."""
    return list(getattr(exc, "pinlater_claimed", ()))


def claim_source(claim: str) -> str:
    """The source part of a claim ``TOKEN@SOURCE``."""
    return claim[CLAIM_TOKEN_LEN + 1 :]


def holds(stored: str | None, source: str, claim: str | None) -> bool:
    """Whether an item (``source``, ``claim``) holds a RUNNING job's
    ``stored`` claim: the exact claim when the item gives one, else any
    claim of its source (see the module doc)."""
    if stored is None:
        return False
    if claim is not None:
        return stored == claim
    return claim_source(stored) == source


def policy_delay(delay_table: Sequence[int], attempts_allowed: int, attempts_remaining: int) -> int:
    """The delay-table entry for a job's retry number (see FailItem)."""
    if not delay_table:
        raise ValueError("a failure ACK without its own delay needs the policy's delay table")
    retry_number = attempts_allowed - attempts_remaining + 1
    return delay_table[min(max(retry_number, 1), len(delay_table)) - 1]


@dataclass(frozen=True, slots=True)
class CheckpointItem:
    """Heartbeat: updated_at = now (RUNNING stays RUNNING). Optional changes:
    new body; attempts_allowed (attempts_remaining is set to the same value);
    prepend to custom status. With move_to_pending: state PENDING, claim
    cleared, run_after = run_after_ms or now, attempts_remaining unchanged
    (unless attempts_allowed given). Without move_to_pending, run_after_ms
    (if given) is stored as the job's run_after for a later re-pend."""

    priority: int
    local_id: int
    source: str
    new_body: bytes | None
    move_to_pending: bool
    run_after_ms: int | None
    attempts_allowed: int | None
    prepend_custom_status: str | None
    claim: str | None = None  # as AckItem's


@dataclass(frozen=True, slots=True)
class JobRecord:
    local_id: int
    priority: int
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int
    updated_at_ms: int
    claim: str | None  # None when not RUNNING
    body: bytes | None  # None unless asked for
    key: str = ""  # fairness key ("" none)

    @property
    def sort_time_ms(self) -> int:
        return self.run_after_ms if self.state is JobState.PENDING else self.updated_at_ms


@dataclass(frozen=True, slots=True)
class ScanQuery:
    """One page of a scan of one (queue, priority): the jobs in ``state``
    (PENDING split by ``future``: run_after > now, else run_after <= now;
    ignored for other states), ordered by (sort_time desc, local_id desc),
    strictly after the cursor ``before`` = (sort_time, local_id), at most
    ``limit`` of them, with their bodies if ``include_body``.

    ``max_body_bytes``: the most body bytes the page may bring from the
    store (None: no bound). With bodies, the page ends at the first job
    whose body would take it past that: the job comes without its body
    (``body`` None, withheld), and no job after it comes. Without bodies,
    none is brought at all (where a job's body is part of one stored
    value, the store cuts it off)."""

    queue: str
    priority: int
    state: JobState
    future: bool = False
    before: tuple[int, int] | None = None
    limit: int = 100
    include_body: bool = False
    max_body_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ExpiredClaims:
    repended: int
    failed: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What ``ShardBackend.cancel`` found of one job: its state before (None:
    no such job) and, for one it ended while RUNNING, the claim it ended
    (the slots it held are freed by it); its fairness key."""

    state: JobState | None
    claim: str | None = None
    key: str = ""


@runtime_checkable
class ShardBackend(Protocol):
    """Storage for one shard. Method names follow the transitions they make."""

    shard_id: str

    # -- housekeeping ------------------------------------------------------
    def ping(self) -> None:
        """Raise ShardUnavailable unless the shard answers."""

    def probe(self) -> None:
        """Raise unless the shard answers and accepts a write: a small
        write of its own that leaves nothing behind for long (the health
        prober's check; a shard that answers but refuses writes raises
        ShardWriteRefused)."""

    def store_id(self) -> str:
        """The store's own id, given it when first asked and kept in it:
        the same for every shard id whose URL reaches this store (a URL
        copied under two ids), and new once the store lost its data."""

    def now_ms(self) -> int:
        """The shard's clock."""

    def close(self) -> None:
        """Release connections."""

    def create_queue(self, queue: str, priorities: int) -> None:
        """Idempotent: make storage for priorities 1..priorities exist."""

    def delete_queue(self, queue: str) -> None:
        """Idempotent: drop the queue and every job in it."""

    def queue_names(self) -> set[str]:
        """Queues that have storage on this shard."""

    def stored_queues(self) -> dict[str, int]:
        """The same queues, each with the number of priorities it has
        storage for: what a queue's config must say to reach all its jobs
        here (``Operators.restore_queues``)."""

    # -- transitions ---------------------------------------------------------
    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        """-> PENDING with attempts_remaining = attempts_allowed, created_at =
        updated_at = now, run_after = given or now. Returns local ids in
        order. All items are stored, or none (one script / transaction)."""

    def enqueue_unique(
        self, queue: str, items: Sequence[EnqueueItem], succeeded_ms: int, priorities: int
    ) -> list[int | Existing]:
        """``enqueue``, where an item with a unique key is stored only if no
        job of the queue on this shard holds that key: one PENDING or
        RUNNING, or SUCCEEDED less than ``succeeded_ms`` ago (any priority).
        Such an item's answer is that job (``Existing``); a later item of
        the call with the key of an earlier one's is that one's. A key is
        held by checking its job's state, so it is free exactly when the
        job ends (whatever ends it: ACK, expiry, cancel, delete) and never
        outlives it. In the same atomic step as the enqueue. ``priorities``:
        the queue's (a holder is of one of them). Every shard
        that stores unique jobs drops its record of a key with the job
        (garbage collection, delete, queue delete)."""

    def dequeue(
        self,
        queue: str,
        priorities: Sequence[int],
        limit: int,
        source: str,
        look_ahead: Sequence[int] = (),
        token: str | None = None,
        allow: dict[str, int] | None = None,
        counted: bool = False,
    ) -> Claims:
        """PENDING with run_after <= now -> RUNNING, at most ``limit`` in all,
        ``priorities`` in the order given and within one priority oldest
        run_after first (then lowest id), under one new claim
        ``TOKEN@source``; updated_at = now. One atomic step on the shard
        whatever the number of priorities; see Claims for ``look_ahead``.
        ``token``: the claim's TOKEN (``new_claim_token``), a new random one
        if None.

        ``allow`` (per-key limits): how many more jobs each fairness key may
        start, counted down here as they are taken. In a priority served by
        lanes, a lane whose first job is due and whose key has 0 left loses
        its turn without a job; one whose key is not in ``allow``, or that
        lost its turn already since the last job taken, ends the call
        keeping its turn (``Claims.stopped_at``: the caller gets its key's
        allowance and calls again); jobs without a key are not limited
        (``pinlater/stores/memory/lanes.py`` states the rules).

        ``counted``: the queue has a cap or a per-key cap, so its running
        jobs are counted (``running_owners``) on every monitor pass; a store
        may keep what that count reads as it claims (Redis does: reading
        the jobs would copy their bodies)."""

    def lane_keys(self, queue: str, priorities: Sequence[int], limit: int) -> list[str]:
        """The keys of the lanes a dequeue of ``limit`` jobs serves first
        (per priority: lanes in turn, lanes that came due, keyed jobs not
        in their lanes yet), each once, so that the caller can get their
        allowances first. Changes nothing a dequeue would not. The
        priorities are read in order until ``limit`` keys are found, so the
        answer, and its cost, grow with ``limit``, not with the number of
        priorities: a dequeue that meets a key it has no allowance for stops
        there, and the caller reads more."""

    def peek(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()
    ) -> Claims:
        """What dequeue would return, changing nothing (claim "")."""

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        """RUNNING (the item holds the claim) -> SUCCEEDED; updated_at = now;
        custom status appended; claim cleared. True per applied item."""

    def ack_failed(
        self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()
    ) -> list[bool]:
        """RUNNING (the item holds the claim) -> PENDING with attempts_remaining
        - 1 and run_after = now + delay (the item's, else the table's, see
        FailItem) when attempts_remaining > 1; else -> FAILED with
        attempts_remaining = 0. updated_at = now; custom status appended;
        claim cleared. One atomic step on the shard."""

    def checkpoint(self, queue: str, items: Sequence[CheckpointItem]) -> list[bool]:
        """See CheckpointItem. True per applied item."""

    def running_owners(self, queue: str, priority: int) -> dict[tuple[str, str], int]:
        """How many jobs are RUNNING per claim owner (the first
        ``CLAIM_OWNER_LEN`` characters of their claims' tokens) and
        fairness key. One atomic read of the priority's running jobs
        (``pinlater.engine.slots``)."""

    def expire_claims(
        self, queue: str, priority: int, timeout_ms: int, limit: int
    ) -> ExpiredClaims:
        """RUNNING with updated_at <= now - timeout_ms: as a failure ACK with
        no delay (PENDING with attempts_remaining - 1, run_after = now; or
        FAILED at the last attempt). Claim cleared. At most ``limit``."""

    def gc(self, queue: str, priority: int, state: JobState, older_than_ms: int, limit: int) -> int:
        """Delete up to ``limit`` jobs in terminal ``state`` whose
        updated_at <= now - older_than_ms. Returns how many."""

    def release(self, queue: str, priority: int, local_ids: Sequence[int]) -> list[JobState | None]:
        """PENDING jobs without a fairness key that are due later become
        due now (run_after = now); every other job is left as it is. Per
        id, the job's state after (None: no such job). Idempotent: a batch's
        callback, stored when the batch is made and due never, is released
        so once the batch has ended, however many times that is said."""

    def retry_failed(
        self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        """FAILED -> PENDING for up to ``limit`` jobs (most recently failed
        first): attempts_allowed = attempts_remaining = attempts, run_after =
        given or now, updated_at = now. Returns how many."""

    def cancel(self, queue: str, priority: int, local_ids: Sequence[int], status: str) -> list[Cancelled]:
        """The jobs of ``local_ids`` that are PENDING or RUNNING end FAILED at
        once: attempts_remaining 0, claim cleared, ``status`` appended to the
        custom status, updated_at = now; a pending one never runs, a running
        one's ACKs and checkpoints are stale from here on. Others are left
        as they are. Per id, in order, what it was."""

    def delete(
        self,
        queue: str,
        priority: int,
        state: JobState,
        local_ids: Sequence[int] | None,
        limit: int,
    ) -> int:
        """Delete jobs in ``state``: the given ids (only those still in that
        state) or, with ids None, up to ``limit`` of them. Returns how many."""

    # -- reads -----------------------------------------------------------------
    def count(self, queue: str, priority: int, state: JobState, future: bool) -> int:
        """Jobs in ``state``. For PENDING: run_after <= now, or with
        ``future`` run_after > now. ``future`` is ignored for other states."""

    def scan(self, query: ScanQuery) -> list[JobRecord]:
        """The page ``query`` asks for (see ``ScanQuery``)."""

    def lookup(
        self,
        queue: str,
        priority: int,
        local_ids: Sequence[int],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord | None]:
        """Records in the order asked; None for an unknown id. An id asked
        twice gets the same record (its body is not copied).

        ``max_body_bytes``: the most body bytes the call may bring from the
        store (None: no bound). With bodies, when those of the jobs found
        come to more, every record comes without its body (withheld), and
        no body past the bound is kept. Without bodies, none is brought."""
