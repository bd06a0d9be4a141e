# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The Kombu channel over PinLater.

Task queues (PinLater queue names) map publish -> enqueue and consume ->
batched dequeue under the queue's rate limit; every other queue is
transient broadcast traffic over Redis pub/sub (``workers.bus``).

Consuming a task queue: the transport calls ``pump`` on every turn of the
worker's event loop (or of ``drain_events``). A queue is claimed from when
it is *due*: woken (a publish pushed a wake-up, or the window of a
wake-up closed: ``workers.waker``), known to have a backlog
(the last claim came back full), or its slow-poll time came; never while
rate-limited, and never for more jobs than the prefetch window has room
for (``qos.can_consume_max_estimate()``), so the worker holds no more than
Celery's prefetch and the rest stays on the shard, where a dead worker
cannot lose it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass
from queue import Empty
from typing import TYPE_CHECKING, Any

from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from pinlater.errors import AckNotApplied, DequeueRateLimited, PinLaterError, QueueNotFound
from pinlater.models import Checkpoint, DequeuedJob, Job
from pinlater.states import JobState
from workers import registry, task_guard
from workers.bus import encode_transient
from workers.client import queue_config
from workers.message_format import (
    StoredMessage,
    decode,
    delivery_tag,
    encode,
    eta_to_ms,
    kombu_payload,
    raw_message,
    tagged,
)
from workers.publish_info import remember_descriptor
from workers.qos import PendingAcks, PinLaterQoS, queue_of
from workers.waker import COALESCE_S, RECHECK_SLACK_S, WAKER

if TYPE_CHECKING:
    from workers.transport import Transport

log = logging.getLogger(__name__)
# Headers that set the job's attempts and idempotency key, not stored.
_JOB_HEADERS = frozenset({"pinlater_attempts", "pinlater_idempotency_key"})
# ACKs or releases per call: well under any sane PINLATER_MAX_JOBS_PER_CALL.
ACK_CHUNK = 100
# ACKs go out (riding along with a claim when there is one) once this many
# wait or the oldest has waited ACK_LINGER_S: one call per few claims instead
# of one per claim. A job stays RUNNING that much longer after its task
# returned; a worker killed meanwhile leaves it to its claim timeout, as
# one killed just before its ACK always did.
ACK_BATCH = 50
ACK_LINGER_S = 0.01
_DUE_SLACK_MS = 50
# After a failed call to the job service, wait this long before the next try.
ERROR_BACKOFF_S = 1.0
# AMQP queue arguments a task queue does not honour (they are per-queue
# limits and TTLs of a broker that holds messages; PinLater keeps jobs
# until they end and its retention removes them).
UNSUPPORTED_QUEUE_ARGUMENTS = frozenset({"x-expires", "x-message-ttl", "x-max-length", "x-max-length-bytes"})
# Custom status of a job whose message expired before it could be delivered.
EXPIRED_STATUS = "expired: not delivered (its message's expiration passed)"


def _checkpoint(tag: str, **changes: Any) -> Checkpoint:
    """A checkpoint of one delivery: of its job, under its claim."""
    descriptor, claim = tagged(tag)
    return Checkpoint(descriptor, claim=claim, **changes)


def expires_at(expiration: Any) -> int | None:
    """Kombu's ``expiration`` property (milliseconds, as AMQP gives it: a
    string) as the epoch ms after which the message is not delivered."""
    if expiration is None or expiration == "":
        return None
    try:
        ttl_ms = float(expiration)
    except (TypeError, ValueError):
        raise ValueError(f"expiration must be a number of milliseconds, got {expiration!r}") from None
    if not math.isfinite(ttl_ms):
        raise ValueError(f"expiration must be a finite number of milliseconds, got {expiration!r}")
    return int(time.time() * 1000 + max(0.0, ttl_ms))


@dataclass(slots=True)
class QueueState:
    hot: bool = True  # claim as soon as there is room
    next_poll: float = 0.0  # monotonic: slow poll
    recheck: float = math.inf  # monotonic: claim again when a wake-up's window is over
    blocked_until: float = 0.0  # monotonic: rate limited or erroring
    next_heartbeat: float = 0.0


class Channel(virtual.Channel):
    QoS = PinLaterQoS
    supports_fanout = True
    do_restore = True

    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._buffer: deque[tuple[str, DequeuedJob]] = deque()
        self._states: dict[str, QueueState] = {}
        self._rotation = 0
        # Queues whose consumer acks nothing (no_ack): jobs are ACKed on
        # delivery, and the prefetch window does not apply.
        self._no_ack: set[str] = set()

    @property
    def client(self) -> Any:
        return self.connection.service

    # -- publishing -------------------------------------------------------------------
    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any) -> None:
        if not exchange:
            # Celery's path for a direct exchange: the routing key is the queue.
            routing_key = registry.job_queue_name(routing_key)
            if registry.is_task_queue(routing_key):
                self._enqueue(routing_key, message)
                return
            targets: list[str] = []
        else:
            try:
                targets = list(self.typeof(exchange).lookup(self.get_table(exchange), exchange, routing_key, None))
            except KeyError:
                targets = []
        task_queues = [q for q in targets if registry.is_task_queue(q)]
        for queue in task_queues:
            self._enqueue(queue, message)
        if task_queues:
            return
        # Broadcast: published once, to whoever is bound (subscribed) now.
        props = message["properties"]
        props.setdefault("delivery_info", {}).update(exchange=exchange, routing_key=routing_key)
        if exchange:
            channel = self.connection.names.exchange(exchange, self.typeof(exchange).type, routing_key)
        else:
            channel = self.connection.names.queue(routing_key)
        props["delivery_tag"] = self._next_delivery_tag()
        self.connection.bus.publish(channel, encode_transient(message))

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        if registry.is_task_queue(queue):
            self._enqueue(queue, message)
        else:
            self.connection.bus.publish(self.connection.names.queue(queue), encode_transient(message))

    def _enqueue(self, queue: str, message: dict[str, Any]) -> None:
        """One job on task queue ``queue``: one call to the job service (on
        the Redis backend one script, one round trip); the wake-up goes out
        from another thread."""
        headers = message.get("headers") or {}
        body = message.get("body") or b""
        if isinstance(body, str):
            body = body.encode(message.get("content-encoding") or "utf-8")
        run_after_ms = eta_to_ms(headers.get("eta"))
        attempts = headers.get("pinlater_attempts")
        idempotency_key = headers.get("pinlater_idempotency_key")
        if attempts is not None or idempotency_key is not None:
            # Not stored, and left in the caller's headers: a publish retried
            # after a connection error sends them again.
            message = {**message, "headers": {k: v for k, v in headers.items() if k not in _JOB_HEADERS}}
        stored = encode(message, body, expires_at_ms=expires_at(message["properties"].get("expiration")))
        try:
            descriptor = self._enqueue_job(queue, message, stored, run_after_ms, attempts, idempotency_key)
        except QueueNotFound:
            # Not there yet (publishes declare nothing: see PinLaterTask), or
            # deleted since (an operator, a test reset): declare it, as a
            # worker would, with its task's config.
            self.connection.ensure_queue(queue, again=True)
            descriptor = self._enqueue_job(queue, message, stored, run_after_ms, attempts, idempotency_key)
        remember_descriptor(descriptor)
        if run_after_ms is None or run_after_ms <= time.time() * 1000 + _DUE_SLACK_MS:
            connection = self.connection
            WAKER.wake(connection.bus, connection.names.wake(queue))

    def _enqueue_job(self, queue: str, message: dict[str, Any], stored: bytes, run_after_ms: int | None,
                     attempts: Any, idempotency_key: str | None) -> str:
        priority = self._priority(queue, message["properties"].get("priority"))
        job = Job(stored, priority=priority, run_after_ms=run_after_ms,
                  attempts_allowed=int(attempts) if attempts else None)
        [descriptor] = self.client.enqueue(queue, [job], idempotency_key=idempotency_key)
        return str(descriptor)

    def _priority(self, queue: str, kombu_priority: Any) -> int:
        """PinLater priority 1 is the highest, as 0 is with Kombu's Redis
        transport. A queue declared with ``max_priority=N`` has N + 1
        priorities: Kombu's 0..N -> PinLater 1..N+1 (spread over fewer, in
        order, if the queue has fewer). Any other queue: 0 and 1 -> 1,
        larger numbers are the PinLater priority, clamped to the lowest."""
        try:
            wanted = int(kombu_priority or 0)
        except (TypeError, ValueError):
            wanted = 0
        declared = registry.max_priority(queue)
        if declared is not None:
            if declared <= 0 or wanted <= 0:
                return 1
            priorities = queue_config(self.client, queue).priorities
            return 1 + min(wanted, declared) * (priorities - 1) // declared
        if wanted <= 1:
            return 1
        return min(wanted, queue_config(self.client, queue).priorities)

    # -- declaring --------------------------------------------------------------------
    # Kombu's queue names become PinLater queue names on the way in
    # (``registry.job_queue_name``): everything below sees only those.
    def queue_declare(self, queue: str | None = None, passive: bool = False, **kwargs: Any) -> Any:
        return super().queue_declare(registry.job_queue_name(queue) if queue else None, passive, **kwargs)

    def queue_bind(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        return super().queue_bind(registry.job_queue_name(queue), *args, **kwargs)

    def queue_unbind(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        return super().queue_unbind(registry.job_queue_name(queue), *args, **kwargs)

    def queue_purge(self, queue: str, **kwargs: Any) -> Any:
        return super().queue_purge(registry.job_queue_name(queue), **kwargs)

    def prepare_queue_arguments(self, arguments: Any, **kwargs: Any) -> Any:
        # Kombu's Queue(max_priority=..., message_ttl=...) as AMQP arguments.
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        if registry.is_task_queue(queue):
            arguments = kwargs.get("arguments") or {}
            max_priority = arguments.get("x-max-priority")
            if max_priority is not None:
                registry.declare_max_priority(queue, max_priority)
            ignored = sorted(set(arguments) & UNSUPPORTED_QUEUE_ARGUMENTS)
            if ignored:
                log.warning("queue %s: %s not supported on pinlater:// (see workers/README.md); ignored",
                            queue, ", ".join(ignored))
            self.connection.ensure_queue(queue)
        else:
            self.connection.subscriber.add_queue(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        if registry.is_task_queue(queue):
            return queue in self.client.queue_names()
        return True

    def _queue_bind(self, exchange: str, routing_key: str, pattern: Any, queue: str) -> None:
        if not registry.is_task_queue(queue):
            self.connection.subscriber.bind(queue, exchange, self.typeof(exchange).type, routing_key)

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any) -> None:
        # Never drops a PinLater queue: that is an operator's act
        # (``pinlater delete-queue``), not a side effect of a Kombu call.
        queue = registry.job_queue_name(queue)
        self.state.queue_bindings_delete(queue)
        if not registry.is_task_queue(queue):
            self.connection.subscriber.remove_queue(queue)

    def _purge(self, queue: str) -> int:
        if not registry.is_task_queue(queue):
            buffer = self.connection.subscriber.buffers.get(queue)
            n = len(buffer) if buffer else 0
            if buffer:
                buffer.clear()
            return n
        total = 0
        while True:
            n = int(self.client.delete_jobs(queue, JobState.PENDING, limit=10_000))
            total += n
            if n < 10_000:
                return total

    def _size(self, queue: str) -> int:
        if registry.is_task_queue(queue):
            return int(self.client.count(queue, JobState.PENDING))
        buffer = self.connection.subscriber.buffers.get(queue)
        return len(buffer) if buffer else 0

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        queue = registry.job_queue_name(queue)
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack and registry.is_task_queue(queue):
            self.qos.auto_ack(message.delivery_tag)
            self.flush_acks()
        return message

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """One message for ``basic_get``."""
        if not registry.is_task_queue(queue):
            self.connection.subscriber.read(0.0)
            buffer = self.connection.subscriber.buffers.get(queue)
            if not buffer:
                raise Empty()
            return buffer.popleft()
        while True:
            jobs = self.client.dequeue(queue, 1, source=self.connection.source)
            if not jobs:
                raise Empty()
            stored = self._stored(queue, jobs[0])
            if stored is not None:
                return kombu_payload(stored, queue, jobs[0], self.connection.source)
            self.flush_acks()

    # -- consuming --------------------------------------------------------------------
    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        queue = registry.job_queue_name(queue)
        result = super().basic_consume(queue, no_ack, *args, **kwargs)
        if no_ack:
            self._no_ack.add(queue)
        else:
            self._no_ack.discard(queue)
        if registry.is_task_queue(queue):
            self._states.setdefault(queue, QueueState())
            self.connection.subscriber.watch(queue)
        return result

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue and queue not in self._active_queues and registry.is_task_queue(queue):
            self._states.pop(queue, None)
            self.connection.subscriber.unwatch(queue)
        return result

    def pump(self, now: float) -> int:
        """Delivers what can be delivered now; returns how many messages."""
        delivered = self._deliver_transient()
        if self._states:
            woken = self.connection.subscriber.woken
            for queue in list(woken):
                state = self._states.get(queue)
                if state is not None:
                    # Publishers send one wake-up per window of COALESCE_S:
                    # a job enqueued later in the window sent none, so
                    # claim once more when the window is over.
                    state.hot = True
                    state.recheck = now + COALESCE_S + RECHECK_SLACK_S
                    woken.discard(queue)
            for state in self._states.values():
                if state.recheck <= now:
                    state.hot, state.recheck = True, math.inf
            self._claim(now)
            delivered += self._deliver_buffer()
            self._heartbeat(now)
        if self._acks_due() <= now:
            self.flush_acks()
        return delivered

    def _acks_due(self) -> float:
        """When the waiting ACKs and releases should go out (monotonic)."""
        qos: PinLaterQoS | None = self._qos
        count, since = qos.pending_stats() if qos is not None else (0, None)
        if since is None:
            return math.inf
        return since if count >= ACK_BATCH else since + ACK_LINGER_S

    def next_due(self, now: float) -> float:
        """When this channel next has work of its own (claims, ACKs, heartbeats)."""
        due = min(now + 3600.0, self._acks_due())
        room = self._room() > 0
        for state in self._states.values():
            if room:
                wanted = now if state.hot else min(state.next_poll, state.recheck)
                due = min(due, max(state.blocked_until, wanted))
            if state.next_heartbeat:
                due = min(due, state.next_heartbeat)
        return due

    def _room(self) -> int:
        if not self._states:
            return 0
        estimate = self.qos.can_consume_max_estimate()
        room = self.connection.settings.max_batch if estimate is None else estimate
        return int(room) - len(self._buffer)

    def _claim(self, now: float) -> None:
        queues = list(self._states)
        self._rotation = (self._rotation + 1) % len(queues)
        for queue in queues[self._rotation:] + queues[: self._rotation]:
            room = min(self._room(), self.connection.settings.max_batch)
            if room <= 0:
                return
            state = self._states[queue]
            if now < state.blocked_until or (not state.hot and now < state.next_poll):
                continue
            # ACKs that are due ride along: one call, one round trip through
            # a Thrift server.
            pending = self.qos.take_pending(queue) if self._acks_due() <= now else {}
            acks = pending.get(queue, PendingAcks())
            try:
                jobs = self.client.dequeue(
                    queue, room, source=self.connection.source, succeeded=acks.succeeded, failed=acks.failed
                )
            except DequeueRateLimited as exc:
                state.blocked_until = now + max(exc.retry_after_ms, 5) / 1000
                acks.succeeded, acks.failed = [], []
                if acks:
                    self.qos.put_back({queue: acks})
                continue
            except (PinLaterError, OSError) as exc:
                log.warning("claiming from %s failed, retrying in %.0fs: %s", queue, ERROR_BACKOFF_S, exc)
                state.blocked_until = now + ERROR_BACKOFF_S
                self.qos.put_back(pending)
                continue
            acks.succeeded, acks.failed = [], []
            if acks:
                self.qos.put_back({queue: acks})
            # Short of the room may mean the rate limiter granted fewer, not
            # that the queue ran dry: stay hot until a claim comes back empty.
            state.hot = bool(jobs)
            state.next_poll = now + self.connection.settings.poll_interval_s
            if jobs and state.next_heartbeat <= now:
                state.next_heartbeat = now + self._heartbeat_interval(queue)
            self._buffer.extend((queue, job) for job in jobs)

    def _deliver_buffer(self) -> int:
        delivered = 0
        # Where Kombu's basic_consume registers each queue's callback, and
        # where its own virtual channel delivers from. Checked against
        # Kombu 5.7 (tests/unit/test_third_party_guards.py).
        callbacks = self.connection._callbacks
        source = self.connection.source
        while self._buffer and self.qos.can_consume():
            queue, job = self._buffer[0]
            callback = callbacks.get(queue)
            if callback is None:
                break
            self._buffer.popleft()
            stored = self._stored(queue, job)
            if stored is None:
                continue
            if queue in self._no_ack:
                self.qos.auto_ack(delivery_tag(job))
            callback(kombu_payload(stored, queue, job, source))
            delivered += 1
        return delivered

    def _deliver_transient(self) -> int:
        delivered = 0
        buffers = self.connection.subscriber.buffers
        callbacks = self.connection._callbacks
        for queue in list(self._active_queues):
            buffer = buffers.get(queue)
            callback = callbacks.get(queue)
            # The prefetch window holds for transient consumers that ack too
            # (Celery's remote control and events consume with no_ack).
            windowed = queue not in self._no_ack
            while buffer and callback is not None and (not windowed or self.qos.can_consume()):
                callback(buffer.popleft())
                delivered += 1
        return delivered

    def _stored(self, queue: str, job: DequeuedJob) -> StoredMessage | None:
        """The message of a claimed job, or None when it expired before this
        delivery or a worker must not run it (``workers.task_guard``): then
        the job is ended, see ``PinLaterQoS.expire``."""
        stored = decode(job.body) or raw_message(job.body, registry.task_for_queue(queue), job.descriptor)
        if stored.expires_at_ms is not None and stored.expired(int(time.time() * 1000)):
            self.qos.expire(delivery_tag(job), EXPIRED_STATUS)
            return None
        if task_guard.enforced():
            reason = task_guard.refusal(queue, stored)
            if reason is not None:
                task_guard.refused(queue, stored, job.descriptor, reason)
                self.qos.expire(delivery_tag(job), reason)
                return None
        return stored

    # -- acks, heartbeats, release ----------------------------------------------------------
    def on_settled(self) -> None:
        self.connection.on_settled()

    def settles_at_once(self) -> bool:
        """ACKs go out when made: no event loop batches them, and no
        ``drain_events`` call is running that flushes them as it returns."""
        return self.connection.settles_at_once()

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
            if result.stale:
                log.warning("%d held jobs on %s had timed out before their heartbeat", len(result.stale), queue)

    def release_buffer(self) -> None:
        """Jobs claimed but never handed to Celery go back to PENDING."""
        released: dict[str, PendingAcks] = {}
        while self._buffer:
            queue, job = self._buffer.popleft()
            released.setdefault(queue, PendingAcks()).released.append(delivery_tag(job))
        if released:
            self.qos.put_back(released)

    def close(self) -> None:
        if not self.closed:
            for consumer in list(self._consumers):
                self.basic_cancel(consumer)
            self.release_buffer()
            if self._qos is None:
                self.flush_acks(final=True)
        super().close()
