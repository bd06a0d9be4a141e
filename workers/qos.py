# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""QoS for a claim-based broker: the delivered-but-unacked window, and
what ack, reject and restore mean when PinLater holds the only copy.

Kombu's virtual QoS acks by forgetting the tag, rejects with requeue by
re-publishing a copy, and on close re-publishes every unacked message.
Here a job never leaves its shard, so:

* ack      -> ACK success (batched: flushed by the channel on its next pump)
* reject   -> ACK failure; the delay is the one the task asked for
              (``set_retry_delay``), else the queue's retry policy
* reject(requeue=True), restore -> release: back to PENDING without
              spending an attempt (checkpoint with move_to_pending)
* expire   -> the message's ``expiration`` passed before delivery, or the
              worker refuses its task (``workers.task_guard``): the job
              ends FAILED with a status that says which (its attempts are
              set to one, then a failure ACK), never delivered

Where they go out: in a worker (an event loop), ACKs and rejects are
batched and sent by the channel's next turn. Without one (plain Kombu:
``get``, ``drain_events``), each is sent when ``ack()`` returns, or, when
it happens inside ``drain_events`` callbacks, when that call returns. A
release is always sent at once: the job must be claimable again by the
next ``get`` or ``drain_events``.

Kombu's QoS has no public hooks for this: the subclass reads and clears
its delivered tags (``_delivered``, ``_dirty``, ``_quick_ack``, ``_flush``,
``_on_collect``), checked against Kombu 5.7 and guarded by
``tests/unit/test_third_party_guards.py``.

Acks may come from another thread (pool result handlers), so the pending
lists are under a lock; a delivery tag is the job's descriptor
(``QUEUE:sSHARD:pN:ID``) and its claim (``workers.message_format.delivery_tag``),
so a tag alone names the job, its queue and the claim its ACK must hold:
an ACK of a delivery whose claim is gone (the job timed out and runs
again, maybe in this very worker) is stale and changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kombu.transport import virtual

from pinlater.models import CANCELLED_STATUS, Ack
from workers import task_guard
from workers.message_format import tagged

# Custom statuses stay short: they are appended on every attempt.
STATUS_MAX = 240

log = logging.getLogger(__name__)


def queue_of(tag: Any) -> str | None:
    """The PinLater queue of a delivery tag, or None for transient traffic."""
    if isinstance(tag, str):
        descriptor = tag.partition("/")[0]
        if descriptor.count(":") == 3:
            return descriptor.split(":", 1)[0]
    return None


def ack_of(tag: str, status: str = "", retry_delay_ms: int = 0) -> Ack:
    """The ACK of one delivery: of its job, under its claim."""
    descriptor, claim = tagged(tag)
    return Ack(descriptor, status, retry_delay_ms, claim)


@dataclass(slots=True)
class PendingAcks:
    succeeded: list[Ack] = field(default_factory=list)
    failed: list[Ack] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # delivery tags
    # Jobs to end FAILED undelivered: each failure ACK (under its delivery's
    # claim), sent once the job's attempts are set to one.
    expired: list[Ack] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.succeeded or self.failed or self.released or self.expired)

    def size(self) -> int:
        return len(self.succeeded) + len(self.failed) + len(self.released) + len(self.expired)

    def extend(self, other: PendingAcks) -> None:
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.released += other.released
        self.expired += other.expired


class PinLaterQoS(virtual.QoS):
    def __init__(self, channel: Any, prefetch_count: int = 0) -> None:
        super().__init__(channel, prefetch_count)
        self._lock = threading.Lock()
        self._pending: dict[str, PendingAcks] = defaultdict(PendingAcks)
        self._delays: dict[str, int] = {}
        self._statuses: dict[str, str] = {}
        self._started: set[str] = set()
        # Descriptors of held jobs a heartbeat found cancelled (until ACKed).
        self._cancelled: set[str] = set()
        # How many ACKs and releases wait in _pending, and since when
        # (monotonic) the oldest of them: the channel sends them in batches.
        self._pending_count = 0
        self._pending_since: float | None = None

    # -- called by the Celery side ----------------------------------------------------
    def set_retry_delay(self, delivery_tag: str, delay_ms: int, *, replace: bool = True) -> None:
        """The delay of the failure ACK that the next reject of this tag
        sends (0: the queue's retry policy)."""
        with self._lock:
            if replace or delivery_tag not in self._delays:
                self._delays[delivery_tag] = max(0, int(delay_ms))

    def set_status(self, delivery_tag: str, status: str) -> None:
        """Custom status the ACK of this tag appends to the job (how long
        it ran, or why it failed): operators see it in lookups and scans."""
        with self._lock:
            self._statuses[delivery_tag] = status[:STATUS_MAX]

    def note_cancelled(self, descriptors: list[str]) -> None:
        """Held jobs that were cancelled: Celery skips them
        (``PinLaterRequest.revoked``)."""
        with self._lock:
            self._cancelled.update(descriptors)

    def cancelled(self, delivery_tag: str) -> bool:
        with self._lock:
            return bool(self._cancelled) and tagged(delivery_tag)[0] in self._cancelled

    def mark_started(self, delivery_tag: str) -> None:
        """A pool process took the job: from now on the task heartbeats it,
        not the transport (a hung task must be able to time out)."""
        with self._lock:
            self._started.add(delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        queue = queue_of(delivery_tag)
        if queue is not None and self._revoked(delivery_tag):
            # Celery ACKs the message of a task revoked in this worker
            # (``revoke``, and with ``terminate=True`` once it killed the
            # run): the job is cancelled, not done.
            with self._lock:
                self._started.discard(delivery_tag)
                self._delays.pop(delivery_tag, None)
                self._statuses.pop(delivery_tag, None)
            self.expire(delivery_tag, CANCELLED_STATUS)
            self._quick_ack(delivery_tag)
            self.channel.on_settled()
            self.channel.flush_acks()
            return
        if queue is not None:
            with self._lock:
                self._cancelled.discard(tagged(delivery_tag)[0])
                status = self._statuses.pop(delivery_tag, "")
                self._pending[queue].succeeded.append(ack_of(delivery_tag, status))
                self._started.discard(delivery_tag)
                self._delays.pop(delivery_tag, None)
                self._added(1)
        self._quick_ack(delivery_tag)
        self.channel.on_settled()
        if queue is not None and self.channel.settles_at_once():
            self.channel.flush_acks()

    def _revoked(self, delivery_tag: str) -> bool:
        """Whether this Celery worker has revoked the delivery's task (the
        ids Celery keeps in ``celery.worker.state.revoked``; guarded by
        tests/unit/test_third_party_guards.py). A plain Kombu consumer
        revokes nothing."""
        if not task_guard.enforced():
            return False
        try:
            message = self.get(delivery_tag)
        except KeyError:
            return False
        task_id = (message.headers or {}).get("id")
        from celery.worker import state as worker_state

        return task_id is not None and task_id in worker_state.revoked

    def auto_ack(self, delivery_tag: str) -> None:
        """A message delivered to a no_ack consumer or get: acked on delivery."""
        queue = queue_of(delivery_tag)
        if queue is not None:
            with self._lock:
                self._pending[queue].succeeded.append(ack_of(delivery_tag))
                self._added(1)

    def expire(self, delivery_tag: str, status: str) -> None:
        """Ends a job that is not delivered; ``status`` says why."""
        queue = queue_of(delivery_tag)
        if queue is not None:
            with self._lock:
                self._pending[queue].expired.append(ack_of(delivery_tag, status[:STATUS_MAX]))
                self._added(1)


    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        queue = queue_of(delivery_tag)
        if queue is not None:
            with self._lock:
                self._cancelled.discard(tagged(delivery_tag)[0])
                delay = self._delays.pop(delivery_tag, 0)
                status = self._statuses.pop(delivery_tag, "")
                self._started.discard(delivery_tag)
                if requeue:
                    self._pending[queue].released.append(delivery_tag)
                else:
                    self._pending[queue].failed.append(ack_of(delivery_tag, status, delay))
                self._added(1)
        self._quick_ack(delivery_tag)
        self.channel.on_settled()
        if queue is not None and (requeue or self.channel.settles_at_once()):
            self.channel.flush_acks()

    def _added(self, n: int) -> None:
        # Under self._lock.
        self._pending_count += n
        if self._pending_since is None and n > 0:
            self._pending_since = time.monotonic()

    # -- called by the channel --------------------------------------------------------
    def take_pending(self, queue: str | None = None) -> dict[str, PendingAcks]:
        with self._lock:
            if queue is None:
                taken, self._pending = dict(self._pending), defaultdict(PendingAcks)
                self._pending_count, self._pending_since = 0, None
                return taken
            one = self._pending.pop(queue, None)
            if one:
                self._pending_count -= one.size()
                if not self._pending_count:
                    self._pending_since = None
            return {queue: one} if one else {}

    def put_back(self, pending: dict[str, PendingAcks]) -> None:
        """ACKs that could not be sent: tried again on the next flush (an
        ACK that did land the first time is then reported stale, harmlessly)."""
        with self._lock:
            for queue, acks in pending.items():
                self._pending[queue].extend(acks)
                self._added(acks.size())

    def pending_stats(self) -> tuple[int, float | None]:
        """How many ACKs and releases wait, and since when the oldest
        (monotonic; None when none wait)."""
        with self._lock:
            return self._pending_count, self._pending_since

    def has_pending(self) -> bool:
        with self._lock:
            return any(self._pending.values())

    def unstarted(self) -> list[str]:
        """Delivered to Celery, not acked, not yet taken by a pool process."""
        dirty = self._dirty
        with self._lock:
            started = set(self._started)
        return [t for t in list(self._delivered) if t not in dirty and t not in started and queue_of(t)]

    def restore_unacked(self) -> list[Any]:
        """Release every unacked job (no re-publish, no attempt spent)."""
        self._flush()
        tags = [t for t in list(self._delivered) if queue_of(t)]
        self._delivered.clear()
        with self._lock:
            self._started.clear()
            for tag in tags:
                self._pending[queue_of(tag) or ""].released.append(tag)
            self._added(len(tags))
        return []

    def restore_unacked_once(self, stderr: Any = None) -> None:
        # Kombu runs this on channel close and from an exit finalizer; both
        # must send what is pending, not only what is unacked.
        self._on_collect.cancel()
        if getattr(self._delivered, "restored", False):
            return
        try:
            self.restore_unacked()
            self.channel.flush_acks(final=True)
        finally:
            self._delivered.restored = True  # type: ignore[attr-defined]
