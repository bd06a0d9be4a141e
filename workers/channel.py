# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The Kombu channel over PinLater: declaring, consuming and broadcasting
here; storing a published task (``workers.publishing``) and settling what
was delivered (``workers.settling``) are the mixins it is made of.

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

from pinlater.errors import DequeueRateLimited, PinLaterError
from pinlater.models import DequeuedJob
from pinlater.states import JobState
from workers import registry, task_guard
from workers.bus import encode_transient
from workers.message_format import (
    StoredMessage,
    decode,
    delivery_tag,
    kombu_payload,
    raw_message,
)
from workers.publishing import TaskPublishing
from workers.qos import PendingAcks, PinLaterQoS
from workers.settling import Settling
from workers.waker import COALESCE_S, RECHECK_SLACK_S

if TYPE_CHECKING:
    from workers.transport import Transport

log = logging.getLogger(__name__)
# ACKs go out (riding along with a claim when there is one) once this many
# wait or the oldest has waited ACK_LINGER_S: one call per few claims instead
# of one per claim. A job stays RUNNING that much longer after its task
# returned; a worker killed meanwhile leaves it to its claim timeout, as
# one killed just before its ACK always did.
ACK_BATCH = 50
ACK_LINGER_S = 0.01
# After a failed call to the job service, wait this long before the next try.
ERROR_BACKOFF_S = 1.0
# AMQP queue arguments a task queue does not honour (they are per-queue
# limits and TTLs of a broker that holds messages; PinLater keeps jobs
# until they end and its retention removes them).
UNSUPPORTED_QUEUE_ARGUMENTS = frozenset({"x-expires", "x-message-ttl", "x-max-length", "x-max-length-bytes"})
# Custom status of a job whose message expired before it could be delivered.
EXPIRED_STATUS = "expired: not delivered (its message's expiration passed)"


@dataclass(slots=True)
class QueueState:
    hot: bool = True  # claim as soon as there is room
    next_poll: float = 0.0  # monotonic: slow poll
    recheck: float = math.inf  # monotonic: claim again when a wake-up's window is over
    blocked_until: float = 0.0  # monotonic: rate limited or erroring
    next_heartbeat: float = 0.0


class Channel(TaskPublishing, Settling, virtual.Channel):
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
            task_guard.expired(stored, job.descriptor)
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

    def close(self) -> None:
        if not self.closed:
            for consumer in list(self._consumers):
                self.basic_cancel(consumer)
            self.release_buffer()
            if self._qos is None:
                self.flush_acks(final=True)
        super().close()
