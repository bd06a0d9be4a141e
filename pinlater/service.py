"""The job service: every PinLater operation, in-process.

``JobService`` is what application code and the Thrift server both call. It
validates input, picks shards, applies queue configs (retry policy, rate
limit) and routes each descriptor to its shard; the shard backends make the
transitions atomically. Read-side operations (lookup, count, scan) live in
``pinlater.inspection`` and are mixed in here so that one object is the
whole client interface.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from pinlater import counters
from pinlater.backends import open_backend
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    Claims,
    EnqueueItem,
    FailItem,
    ShardBackend,
    ShardUnavailable,
)
from pinlater.client_api import PinLaterClient
from pinlater.control.base import ControlStore
from pinlater.control.factory import open_control_store
from pinlater.counters import EventCounters
from pinlater.descriptor import JobDescriptor
from pinlater.errors import (
    AckNotApplied,
    EnqueueRejected,
    InvalidRequest,
    NoHealthyShards,
    PinLaterError,
)
from pinlater.idempotency import enqueue_once
from pinlater.inspection import InspectionMixin
from pinlater.models import Ack, AckResult, Checkpoint, DequeuedJob, Job
from pinlater.priority_walk import walk_priorities
from pinlater.queue_admin import QueueAdminMixin
from pinlater.queue_config import QueueConfig
from pinlater.ratelimit import RateLimiter
from pinlater.settings import Settings, default_source
from pinlater.shards import ShardSet
from pinlater.validation import (
    check_attempts,
    check_batch,
    check_delay,
    check_job,
    check_limit,
    check_priority,
    check_source,
    check_status,
    check_timestamp,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class JobService(QueueAdminMixin, InspectionMixin):
    def __init__(
        self,
        shards: ShardSet,
        control: ControlStore,
        settings: Settings | None = None,
        source: str | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.shards = shards
        self.control = control
        self.source = check_source(source or default_source())
        self._config_cache: dict[str, tuple[float, QueueConfig]] = {}
        self._cache_lock = threading.Lock()
        self.rate_limiter = RateLimiter(control, self.settings.rate_burst_s)
        self.counters = EventCounters(control)
        shards.on_recover(self._ensure_queues_on)
        shards.start_probing()

    @classmethod
    def from_settings(cls, settings: Settings | None = None, source: str | None = None) -> JobService:
        settings = settings or Settings.from_env()
        backends = [open_backend(spec, settings.socket_timeout_s) for spec in settings.shards]
        shards = ShardSet(backends, settings.health_probe_interval_s)
        control = open_control_store(settings.resolved_control_url, settings.socket_timeout_s)
        return cls(shards, control, settings, source)

    def close(self) -> None:
        self.counters.close()
        self.shards.close()
        self.control.close()

    def __enter__(self) -> JobService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_shard(self, backend: ShardBackend, fn: Callable[[ShardBackend], T]) -> T:
        return self.shards.call(backend, fn)

    # -- enqueue -------------------------------------------------------------------
    def enqueue(self, queue: str, jobs: Sequence[Job], *, idempotency_key: str | None = None) -> list[str]:
        """Stores the jobs on one healthy shard chosen at random (free
        sharding) and returns their descriptors in order. All or nothing.
        With ``idempotency_key``, a repeat within the idempotency window
        returns the first call's descriptors and creates nothing."""
        config = self.queue_config(queue)
        if not jobs:
            return []
        if idempotency_key is not None:
            return enqueue_once(
                self.control, queue, idempotency_key, self.settings.idempotency_window_ms,
                lambda: self._enqueue(queue, config, jobs),
            )
        return self._enqueue(queue, config, jobs)

    def _enqueue(self, queue: str, config: QueueConfig, jobs: Sequence[Job]) -> list[str]:
        check_batch(len(jobs), self.settings.max_jobs_per_call, "jobs", EnqueueRejected)
        for job in jobs:
            check_job(config, job, self.settings.max_body_bytes)
        default_attempts = config.retry.attempts_allowed
        items = [
            EnqueueItem(
                body=bytes(job.body),
                priority=job.priority,
                run_after_ms=job.run_after_ms,
                attempts_allowed=job.attempts_allowed or default_attempts,
                custom_status=job.custom_status,
            )
            for job in jobs
        ]
        last_error: Exception | None = None
        for backend in self.shards.require_healthy():
            try:
                ids = self._on_shard(backend, lambda b: b.enqueue(queue, items))
            except ShardUnavailable as exc:
                # Refused or reset before the script ran: try the next shard.
                last_error = exc
                continue
            self.counters.add(queue, counters.ENQUEUED, len(ids))
            return [
                str(JobDescriptor(queue, backend.shard_id, item.priority, local_id))
                for item, local_id in zip(items, ids, strict=True)
            ]
        raise NoHealthyShards(f"no shard accepted the enqueue: {last_error}")

    # -- dequeue -------------------------------------------------------------------
    def dequeue(
        self,
        queue: str,
        limit: int,
        *,
        source: str | None = None,
        dry_run: bool = False,
        coverage: float = 1.0,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
    ) -> list[DequeuedJob]:
        """Claims up to ``limit`` runnable jobs, highest priority first,
        visiting shards in random order. ACKs riding along are applied first.
        Raises DequeueRateLimited when the queue's rate allows nothing now."""
        source = check_source(source or self.source)
        if succeeded or failed:
            self.ack(queue, succeeded=succeeded, failed=failed, source=source)
        config = self.queue_config(queue)
        check_limit(limit)
        if not 0.0 < coverage <= 1.0:
            raise InvalidRequest(f"coverage must be in (0, 1], got {coverage!r}")
        shards = self.shards.require_healthy()
        shards = shards[: max(1, math.ceil(coverage * len(shards)))]
        if dry_run:
            return self._collect(queue, config, shards, limit, lambda b, ps, n, ahead: b.peek(queue, ps, n, ahead))
        granted = self.rate_limiter.take(config, limit)
        jobs: list[DequeuedJob] = []
        try:
            jobs = self._collect(
                queue, config, shards, granted,
                lambda b, ps, n, ahead: b.dequeue(queue, ps, n, source, ahead),
            )
        finally:
            self.rate_limiter.give_back(config, granted - len(jobs))
        self.counters.add(queue, counters.DEQUEUED, len(jobs))
        return jobs

    def _collect(
        self,
        queue: str,
        config: QueueConfig,
        shards: list[ShardBackend],
        limit: int,
        take: Callable[[ShardBackend, Sequence[int], int, Sequence[int]], Claims],
    ) -> list[DequeuedJob]:
        # Priority-major across shards (a priority-1 job on any shard goes
        # before a priority-2 job on another), about one call per shard.
        picked = walk_priorities(
            shards, config.priorities, limit,
            lambda backend, ps, n, ahead: self._on_shard(backend, lambda b: take(b, ps, n, ahead)),
        )
        return [
            DequeuedJob(
                descriptor=str(JobDescriptor(queue, backend.shard_id, c.priority, c.local_id)),
                body=c.body,
                attempts_allowed=c.attempts_allowed,
                attempts_remaining=c.attempts_remaining,
                claim=c.claim,
            )
            for backend, c in picked
        ]

    # -- ack and checkpoint ------------------------------------------------------------
    def ack(
        self,
        queue: str,
        *,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
        source: str | None = None,
    ) -> AckResult:
        """Success ACKs -> SUCCEEDED; failure ACKs -> PENDING after the retry
        delay (the ACK's own, or the queue policy's), or FAILED at the last
        attempt. ACKs from a caller that no longer holds the claim change
        nothing and are reported stale."""
        source = check_source(source or self.source)
        config = self.queue_config(queue)
        check_batch(len(succeeded) + len(failed), self.settings.max_jobs_per_call, "ACKs")
        for a in failed:
            check_delay(a.retry_delay_ms)
        for a in (*succeeded, *failed):
            check_status(a.append_custom_status)
        # Parse and route everything before applying anything.
        succeeded_by_shard = self._by_shard(queue, config, succeeded)
        failed_by_shard = self._by_shard(queue, config, failed)
        result = AckResult()
        errors: list[str] = []
        for backend, acks in succeeded_by_shard:
            items = [AckItem(d.priority, d.local_id, source, a.append_custom_status) for d, a in acks]
            self._apply(backend, acks, lambda b, i=items: b.ack_succeeded(queue, i), result, errors)  # type: ignore[misc]
        self.counters.add(queue, counters.SUCCEEDED, len(result.acked))
        applied_before_failures = len(result.acked)
        for backend, acks in failed_by_shard:
            self._apply(
                backend, acks, lambda b, a=acks: self._fail_on(b, queue, config, a, source), result, errors  # type: ignore[misc]
            )
        self.counters.add(queue, counters.FAILED, len(result.acked) - applied_before_failures)
        if errors:
            raise AckNotApplied(
                f"{len(result.unapplied)} ACKs not applied (retry them, or they time out and re-run): "
                f"{'; '.join(errors)}",
                result,
            )
        return result

    def _fail_on(
        self,
        backend: ShardBackend,
        queue: str,
        config: QueueConfig,
        acks: list[tuple[JobDescriptor, Ack]],
        source: str,
    ) -> list[bool]:
        # The policy's delay is picked inside the transition from the job's
        # own attempt count: one round trip, no read first.
        items = [
            FailItem(d.priority, d.local_id, source, a.append_custom_status,
                     a.retry_delay_ms if a.retry_delay_ms > 0 else None)
            for d, a in acks
        ]
        return backend.ack_failed(queue, items, config.retry.delay_table())

    def checkpoint(
        self, queue: str, checkpoints: Sequence[Checkpoint], *, source: str | None = None
    ) -> AckResult:
        """Heartbeats (and optional changes) for running jobs held by ``source``."""
        source = check_source(source or self.source)
        config = self.queue_config(queue)
        check_batch(len(checkpoints), self.settings.max_jobs_per_call, "checkpoints")
        for c in checkpoints:
            if c.attempts_allowed is not None:
                check_attempts(c.attempts_allowed)
            check_timestamp(c.run_after_ms)
            if c.prepend_custom_status is not None:
                check_status(c.prepend_custom_status)
            if c.new_body is not None and len(c.new_body) > self.settings.max_body_bytes:
                raise InvalidRequest(f"new body is over {self.settings.max_body_bytes} bytes")
        result = AckResult()
        errors: list[str] = []
        for backend, pairs in self._by_shard(queue, config, checkpoints):
            items = [
                CheckpointItem(
                    d.priority, d.local_id, source, c.new_body, c.move_to_pending,
                    c.run_after_ms, c.attempts_allowed, c.prepend_custom_status,
                )
                for d, c in pairs
            ]
            self._apply(backend, pairs, lambda b, i=items: b.checkpoint(queue, i), result, errors)  # type: ignore[misc]
        if errors:
            raise AckNotApplied(
                f"{len(result.unapplied)} checkpoints not applied: {'; '.join(errors)}", result
            )
        stale = result.stale
        if stale:
            log.info("ignored %d stale checkpoints on %s from %s", len(stale), queue, source)
        return result

    def _by_shard(
        self, queue: str, config: QueueConfig, entries: Iterable[Ack | Checkpoint]
    ) -> list[tuple[ShardBackend, list]]:  # type: ignore[type-arg]
        groups: dict[str, list] = defaultdict(list)  # type: ignore[type-arg]
        for entry in entries:
            d = JobDescriptor.parse(entry.descriptor)
            if d.queue != queue:
                raise InvalidRequest(f"descriptor {entry.descriptor!r} is not in queue {queue!r}")
            check_priority(config, d.priority)
            self.shards.get(d.shard)
            groups[d.shard].append((d, entry))
        return [(self.shards.get(s), pairs) for s, pairs in groups.items()]

    def _apply(
        self,
        backend: ShardBackend,
        pairs: list,  # type: ignore[type-arg]
        op: Callable[[ShardBackend], list[bool]],
        result: AckResult,
        errors: list[str],
    ) -> None:
        try:
            applied = self._on_shard(backend, op)
        except PinLaterError as exc:
            # Unreachable, or failed there: either way these are not known
            # to be applied, and every transition is safe to repeat.
            errors.append(f"shard {backend.shard_id}: {len(pairs)} jobs ({exc})")
            cause = f"shard {backend.shard_id}: {exc}"
            for d, _ in pairs:
                result.unapplied[str(d)] = cause
            return
        for (d, _), ok in zip(pairs, applied, strict=True):
            (result.acked if ok else result.stale).append(str(d))


def connect(settings: Settings | None = None, source: str | None = None) -> PinLaterClient:
    """A client for the given (or environment's) settings: the Thrift client
    of the servers in ``PINLATER_SERVERS`` when set, else the in-process
    service. Both have the same client methods and model types."""
    settings = settings or Settings.from_env()
    if settings.servers:
        from pinlater.thrift_client import ThriftClient

        return ThriftClient.from_settings(settings, source)
    return JobService.from_settings(settings, source)
