# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Settling what a channel delivered (``Settling``, which
``workers.channel.Channel`` is made of): ACKs, expiries and releases sent
in chunks, what was not applied kept for the next flush, heartbeats of the
jobs held but not started, and the unstarted jobs released at close."""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from pinlater.errors import AckNotApplied, PinLaterError
from pinlater.models import Checkpoint, DequeuedJob
from workers.client import queue_config
from workers.message_format import delivery_tag, tagged
from workers.qos import PendingAcks, PinLaterQoS, queue_of

if TYPE_CHECKING:
    from workers.channel import QueueState
    from workers.transport import Transport

log = logging.getLogger(__name__)
# ACKs or releases per call: well under any sane PINLATER_MAX_JOBS_PER_CALL.
ACK_CHUNK = 100


def _checkpoint(tag: str, **changes: Any) -> Checkpoint:
    """A checkpoint of one delivery: of its job, under its claim."""
    descriptor, claim = tagged(tag)
    return Checkpoint(descriptor, claim=claim, **changes)


class Settling:
    connection: Transport
    client: Any
    qos: PinLaterQoS
    _states: dict[str, QueueState]
    _buffer: deque[tuple[str, DequeuedJob]]

    def flush_acks(self, final: bool = False) -> None:
        pending = self.qos.take_pending()
        if not pending:
            return
        failed_queues: dict[str, PendingAcks] = {}
        for queue, acks in pending.items():
            released = bool(acks.released)
            try:
                self._send_expiries(queue, acks)
                self._send_acks(queue, acks)
                self._send_releases(queue, acks)
                state = self._states.get(queue)
                if released and state is not None:
                    state.hot = True  # released jobs are claimable by the next pump
            except (PinLaterError, OSError) as exc:
                log.warning("%s ACKs/releases on %s not sent yet: %s", "final" if final else "", queue, exc)
                failed_queues[queue] = acks
        if failed_queues and not final:
            self.qos.put_back(failed_queues)
        elif failed_queues:
            log.error("giving up on ACKs at shutdown; those jobs will time out and run again: %s",
                      {q: a.size() for q, a in failed_queues.items()})

    def _send_acks(self, queue: str, acks: PendingAcks) -> None:
        """ACKs in calls of at most ACK_CHUNK (the service caps ACKs per call,
        and ACKs that piled up during an outage must still go out). What was
        not applied stays in ``acks``: never what landed, or a retry would
        report it stale."""
        while acks.succeeded or acks.failed:
            succeeded = acks.succeeded[:ACK_CHUNK]
            failed = acks.failed[: ACK_CHUNK - len(succeeded)]
            try:
                self.client.ack(queue, succeeded=succeeded, failed=failed, source=self.connection.source)
            except AckNotApplied as exc:
                left = exc.result.unapplied
                acks.succeeded = [a for a in succeeded if a.descriptor in left] + acks.succeeded[len(succeeded):]
                acks.failed = [a for a in failed if a.descriptor in left] + acks.failed[len(failed):]
                raise
            acks.succeeded, acks.failed = acks.succeeded[len(succeeded):], acks.failed[len(failed):]

    def _send_expiries(self, queue: str, acks: PendingAcks) -> None:
        """Expired (and refused) jobs end FAILED: attempts set to one, then
        their failure ACK (with ``_send_acks``), whose status says why."""
        while acks.expired:
            chunk = acks.expired[:ACK_CHUNK]
            result = self.client.checkpoint(
                queue, [Checkpoint(a.descriptor, attempts_allowed=1, claim=a.claim) for a in chunk],
                source=self.connection.source,
            )
            acks.failed += [a for a in chunk if a.descriptor not in result.stale]
            acks.expired = acks.expired[len(chunk):]

    def _send_releases(self, queue: str, acks: PendingAcks) -> None:
        while acks.released:
            chunk = acks.released[:ACK_CHUNK]
            try:
                self.client.checkpoint(
                    queue, [_checkpoint(t, move_to_pending=True) for t in chunk], source=self.connection.source
                )
            except AckNotApplied as exc:
                left = exc.result.unapplied
                acks.released = [t for t in chunk if tagged(t)[0] in left] + acks.released[len(chunk):]
                raise
            acks.released = acks.released[len(chunk):]

    def _heartbeat_interval(self, queue: str) -> float:
        try:
            timeout_ms = queue_config(self.client, queue).claim_timeout_ms
        except (PinLaterError, OSError):
            timeout_ms = 30_000
        return max(0.05, timeout_ms / 1000 * self.connection.settings.heartbeat_share)

    def _heartbeat(self, now: float) -> None:
        """Keeps the claims of jobs this worker holds but has not started:
        prefetched jobs must not time out while they wait for a pool slot."""
        due = [q for q, s in self._states.items() if s.next_heartbeat and s.next_heartbeat <= now]
        if not due:
            return
        held: dict[str, list[str]] = {q: [] for q in due}
        for tag in self.qos.unstarted():
            queue = queue_of(tag)
            if queue in held:
                held[queue].append(tag)
        for queue, job in self._buffer:
            if queue in held:
                held[queue].append(delivery_tag(job))
        for queue, tags in held.items():
            state = self._states[queue]
            state.next_heartbeat = now + self._heartbeat_interval(queue) if tags else 0.0
            if not tags:
                continue
            try:
                result = self.client.checkpoint(queue, [_checkpoint(t) for t in tags], source=self.connection.source)
            except (PinLaterError, OSError) as exc:
                log.warning("heartbeat of %d held jobs on %s failed: %s", len(tags), queue, exc)
                continue
            if result.cancelled:
                log.info("%d held jobs on %s were cancelled: they will not run", len(result.cancelled), queue)
                self.qos.note_cancelled(result.cancelled)
            if len(result.stale) > len(result.cancelled):
                log.warning("%d held jobs on %s had timed out before their heartbeat",
                            len(result.stale) - len(result.cancelled), queue)

    def release_buffer(self) -> None:
        """Jobs claimed but never handed to Celery go back to PENDING."""
        released: dict[str, PendingAcks] = {}
        while self._buffer:
            queue, job = self._buffer.popleft()
            released.setdefault(queue, PendingAcks()).released.append(delivery_tag(job))
        if released:
            self.qos.put_back(released)
