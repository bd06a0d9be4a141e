# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Publishing a task (``TaskPublishing``, which ``workers.channel.Channel``
is made of): one Kombu message on a task queue becomes one PinLater job
(its body stored with the message's properties, its ETA the job's
run_after, its Kombu priority a PinLater one), and the queue's consumers
are woken; in a bulk scope (``workers.bulk``) the job waits to go out with
the scope's others."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from pinlater.errors import QueueNotFound
from pinlater.models import Job
from workers import bulk, registry
from workers.client import queue_config
from workers.message_format import encode, eta_to_ms
from workers.publish_info import remember_descriptor
from workers.waker import WAKER

if TYPE_CHECKING:
    from workers.transport import Transport

# Headers that set the job's attempts, idempotency, fairness and unique keys
# and its batch (workers.batches), not stored.
_JOB_HEADERS = frozenset({"pinlater_attempts", "pinlater_idempotency_key", "pinlater_key", "pinlater_unique",
                          "pinlater_batch", "pinlater_batch_callback", "pinlater_batch_description"})
_DUE_SLACK_MS = 50


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


class TaskPublishing:
    connection: Transport

    @property
    def client(self) -> Any:
        return self.connection.service

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
        key = headers.get("pinlater_key")
        unique = headers.get("pinlater_unique")
        batch = {name: headers[name] for name in ("pinlater_batch", "pinlater_batch_callback",
                                                  "pinlater_batch_description") if name in headers}
        if attempts is not None or idempotency_key is not None or key is not None or unique is not None or batch:
            # Not stored, and left in the caller's headers: a publish retried
            # after a connection error sends them again.
            message = {**message, "headers": {k: v for k, v in headers.items() if k not in _JOB_HEADERS}}
        stored = encode(message, body, expires_at_ms=expires_at(message["properties"].get("expiration")))
        if bulk.takes(headers) and "pinlater_batch_callback" not in batch:
            try:
                job = self._job(queue, message, stored, run_after_ms, attempts, key, unique)
            except QueueNotFound:
                self.connection.ensure_queue(queue, again=True)
                job = self._job(queue, message, stored, run_after_ms, attempts, key, unique)
            bulk.hold(bulk.Pending(self, queue, job, idempotency_key, batch.get("pinlater_batch")))
            return  # stored, and consumers woken, when the scope ends
        job_keys = (idempotency_key, key, unique, batch)
        try:
            descriptor, duplicate = self._enqueue_job(queue, message, stored, run_after_ms, attempts, *job_keys)
        except QueueNotFound:
            # Not there yet (publishes declare nothing: see PinLaterTask), or
            # deleted since (an operator, a test reset): declare it, as a
            # worker would, with its task's config.
            self.connection.ensure_queue(queue, again=True)
            descriptor, duplicate = self._enqueue_job(queue, message, stored, run_after_ms, attempts, *job_keys)
        remember_descriptor(descriptor, duplicate)
        if duplicate:
            return  # nothing new to run
        if run_after_ms is None or run_after_ms <= time.time() * 1000 + _DUE_SLACK_MS:
            connection = self.connection
            WAKER.wake(connection.bus, connection.names.wake(queue))

    def _enqueue_job(self, queue: str, message: dict[str, Any], stored: bytes, run_after_ms: int | None,
                     attempts: Any, idempotency_key: str | None, key: Any = None,
                     unique: Any = None, batch: dict[str, Any] | None = None) -> tuple[str, bool]:
        """The job's descriptor, and whether it is one that held ``unique``.
        With ``batch``'s ``pinlater_batch_callback``, the job is that batch's
        callback, and the batch is made with it (``workers.batches``)."""
        job = self._job(queue, message, stored, run_after_ms, attempts, key, unique)
        batch = batch or {}
        if "pinlater_batch_callback" in batch:
            made = self.client.create_batch(queue, job, description=batch.get("pinlater_batch_description") or "",
                                            batch=batch["pinlater_batch_callback"])
            return self.client.batch_status(made).callback, False
        answer = self.client.enqueue(queue, [job], idempotency_key=idempotency_key,
                                     batch=batch.get("pinlater_batch"))
        return str(answer[0]), bool(getattr(answer, "duplicates", ()))

    def _job(self, queue: str, message: dict[str, Any], stored: bytes, run_after_ms: int | None, attempts: Any,
             key: Any, unique: Any) -> Job:
        priority = self._priority(queue, message["properties"].get("priority"))
        return Job(stored, priority=priority, run_after_ms=run_after_ms,
                   attempts_allowed=int(attempts) if attempts else None,
                   key="" if key is None else key, unique="" if unique is None else unique)

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
