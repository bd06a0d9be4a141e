"""The job service: every PinLater operation, in-process.

``JobService`` is what application code and the Thrift server both call. It
validates input, picks shards, applies queue configs (retry policy, rate
limit) and routes each descriptor to its shard; the shard backends make the
transitions atomically. Enqueue, dequeue, ACK and checkpoint are here; the
service hands queue administration to a ``QueueAdmin``
(``pinlater.queue_admin``) and reads (lookup, count, scan) to an
``Inspector`` (``pinlater.inspection``), both over the same shard set and
queue config cache, so that one object is the whole client interface.

Besides the client interface (``PinLaterClient``), the service answers the
operators' tools (dashboard, monitor, CLI, demos) through a few read-only
methods (shard status, queue configs, per-shard counts, the oldest pending
job, event rates) and the monitor's two steps, so that nothing outside
reaches into its shards or control store.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from pinlater import counters
from pinlater.backends import open_backend
from pinlater.backends.base import (
    AckItem,
    CheckpointItem,
    Claims,
    EnqueueItem,
    ExpiredClaims,
    FailItem,
    ShardBackend,
    ShardUnavailable,
)
from pinlater.client_api import PinLaterClient
from pinlater.config_cache import QueueConfigCache
from pinlater.control.base import ControlStore
from pinlater.control.factory import open_control_store
from pinlater.counters import EventCounters
from pinlater.descriptor import JobDescriptor, descriptor_prefix
from pinlater.errors import (
    AckNotApplied,
    EnqueueRejected,
    InvalidRequest,
    NoHealthyShards,
    PinLaterError,
    QueueDeleted,
)
from pinlater.idempotency import enqueue_once
from pinlater.inspection import Inspector
from pinlater.models import Ack, AckResult, Checkpoint, DequeuedJob, Job, JobInfo, ScanResult
from pinlater.priority_walk import walk_priorities
from pinlater.queue_admin import QueueAdmin
from pinlater.queue_config import QueueConfig
from pinlater.ratelimit import RateLimiter
from pinlater.retry import RetryPolicy
from pinlater.settings import Settings, default_source
from pinlater.shards import ShardHealth, ShardSet
from pinlater.states import JobState
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

_Routed = list[tuple[ShardBackend, list[tuple[JobDescriptor, Ack]]]]


@dataclass(frozen=True)
class PreparedAcks:
    """One caller's ACKs, checked and routed to their shards (``prepare_ack``)."""

    queue: str
    config: QueueConfig
    source: str
    succeeded: _Routed
    failed: _Routed


@dataclass(frozen=True)
class AckOutcome:
    """One caller's share of ``apply_acks``: its result and, per shard
    that failed, why."""

    ack_result: AckResult
    errors: list[str]

    def result(self) -> AckResult:
        """The result; AckNotApplied if a shard left some unapplied."""
        if self.errors:
            raise AckNotApplied(
                f"{len(self.ack_result.unapplied)} ACKs not applied (retry them, or they time out and re-run): "
                f"{'; '.join(self.errors)}",
                self.ack_result,
            )
        return self.ack_result


class JobService:
    """The in-process client (``PinLaterClient``) and the operators' API.
    ``shards``, ``control`` and ``counters`` are its own parts, public for
    its tests; other code uses the methods."""

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
        self._configs = QueueConfigCache(control, self.settings.config_ttl_s)
        self.rate_limiter = RateLimiter(control, self.settings.rate_burst_s)
        self.counters = EventCounters(control)
        self._inspector = Inspector(shards, self._configs, self.settings)
        self._admin = QueueAdmin(shards, control, self._configs, self.counters, self._inspector, self.settings)
        shards.on_recover(self._admin.ensure_queues_on)
        shards.on_queue_deleted(self._admin.revive_on)
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

    # -- queues (QueueAdmin) ----------------------------------------------------------
    def create_queue(
        self,
        name: str,
        *,
        priorities: int | None = None,
        max_dequeue_rate: float | None = None,
        claim_timeout_ms: int | None = None,
        retry: RetryPolicy | None = None,
        succeeded_retention_ms: int | None = None,
        failed_retention_ms: int | None = None,
    ) -> QueueConfig:
        """Idempotent: an existing queue keeps its config and is returned."""
        return self._admin.create_queue(
            name, priorities=priorities, max_dequeue_rate=max_dequeue_rate, claim_timeout_ms=claim_timeout_ms,
            retry=retry, succeeded_retention_ms=succeeded_retention_ms, failed_retention_ms=failed_retention_ms,
        )

    def delete_queue(self, name: str, password: str | None) -> None:
        """Drops the queue and every job in it, on every shard (needs the admin secret)."""
        self._admin.delete_queue(name, password)

    def check_admin_secret(self, password: str | None) -> None:
        """PasswordInvalid unless ``password`` is the configured admin secret."""
        self._admin.check_admin_secret(password)

    def queue_names(self) -> set[str]:
        """Every queue's name."""
        return self._admin.queue_names()

    def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config, cached for ``config_ttl_s`` so that a change by
        any process is seen everywhere within that time."""
        return self._configs.get(name, fresh=fresh)

    def update_queue(self, name: str, **changes: object) -> QueueConfig:
        """Change a queue's config at run time (rate, pause, claim timeout,
        retry policy, retention); every process sees it within config_ttl_s."""
        return self._admin.update_queue(name, **changes)

    def set_rate(self, name: str, jobs_per_second: float | None) -> QueueConfig:
        """Sets the queue's max dequeue rate (None: unlimited, 0: paused)."""
        return self._admin.set_rate(name, jobs_per_second)

    def pause(self, name: str) -> QueueConfig:
        """Stops every dequeue of the queue."""
        return self._admin.pause(name)

    def resume(self, name: str) -> QueueConfig:
        """Lets a paused queue be dequeued again at its rate."""
        return self._admin.resume(name)

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
        return self.store_enqueued(queue, self.prepare_enqueue(queue, jobs, config))

    def prepare_enqueue(self, queue: str, jobs: Sequence[Job], config: QueueConfig | None = None) -> list[EnqueueItem]:
        """The first half of ``enqueue`` (without idempotency): checks the
        jobs and makes the shard's items; raises for bad input. The server's
        coalescer (``pinlater.thrift.coalesce``) checks each caller's jobs
        with this before it stores several callers' items in one call."""
        config = config or self.queue_config(queue)
        check_batch(len(jobs), self.settings.max_jobs_per_call, "jobs", EnqueueRejected)
        for job in jobs:
            check_job(config, job, self.settings.max_body_bytes)
        default_attempts = config.retry.attempts_allowed
        return [
            EnqueueItem(
                body=bytes(job.body),
                priority=job.priority,
                run_after_ms=job.run_after_ms,
                attempts_allowed=job.attempts_allowed or default_attempts,
                custom_status=job.custom_status,
            )
            for job in jobs
        ]

    def store_enqueued(self, queue: str, items: Sequence[EnqueueItem]) -> list[str]:
        """The second half of ``enqueue``: stores prepared items on one
        healthy shard in one call, all or nothing; their descriptors in order."""
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
        config = self.check_dequeue(queue, limit, coverage)
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

    def check_dequeue(self, queue: str, limit: int, coverage: float = 1.0) -> QueueConfig:
        """A dequeue's arguments checked (the queue exists); its queue's config."""
        config = self.queue_config(queue)
        check_limit(limit)
        if not 0.0 < coverage <= 1.0:
            raise InvalidRequest(f"coverage must be in (0, 1], got {coverage!r}")
        return config

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
        # The descriptors' text from each shard's prefix: a dequeue hands out
        # several jobs per call, and a JobDescriptor made only to be printed
        # cost ~0.7 µs each.
        prefixes = {b.shard_id: descriptor_prefix(queue, b.shard_id) for b in shards}
        return [
            DequeuedJob(
                f"{prefixes[backend.shard_id]}{c.priority}:{c.local_id}",
                c.body, c.attempts_allowed, c.attempts_remaining, c.claim,
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
        prepared = self.prepare_ack(queue, succeeded=succeeded, failed=failed, source=source)
        return self.apply_acks([prepared])[0].result()

    def prepare_ack(
        self,
        queue: str,
        *,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
        source: str | None = None,
    ) -> PreparedAcks:
        """The first half of ``ack``: checks the ACKs and routes each to its
        shard, applying nothing; raises for bad input."""
        source = check_source(source or self.source)
        config = self.queue_config(queue)
        check_batch(len(succeeded) + len(failed), self.settings.max_jobs_per_call, "ACKs")
        for a in failed:
            check_delay(a.retry_delay_ms)
        for a in (*succeeded, *failed):
            check_status(a.append_custom_status)
        # Parse and route everything before applying anything.
        return PreparedAcks(
            queue, config, source, self._by_shard(queue, config, succeeded), self._by_shard(queue, config, failed)
        )

    def apply_acks(self, batch: Sequence[PreparedAcks]) -> list[AckOutcome]:
        """The second half of ``ack`` for one or more callers' prepared ACKs
        of one queue (the server's coalescer merges concurrent callers):
        one call per shard for the success ACKs of all of them, then one per
        shard for the failures, each item under its own caller's source.
        Each caller's outcome is what ``ack`` would have found for it alone:
        a shard that failed leaves that caller's ACKs there unapplied."""
        queue, config = batch[0].queue, batch[0].config
        outcomes: dict[tuple[int, str, bool], list[bool] | PinLaterError] = {}
        for failures in (False, True):
            parts: dict[str, tuple[ShardBackend, list[tuple[int, list[tuple[JobDescriptor, Ack]]]]]] = {}
            for caller, prepared in enumerate(batch):
                for backend, pairs in prepared.failed if failures else prepared.succeeded:
                    parts.setdefault(backend.shard_id, (backend, []))[1].append((caller, pairs))
            for shard_id, (backend, owners) in parts.items():
                op: Callable[[ShardBackend], list[bool]]
                if failures:
                    # The policy's delay is picked inside the transition from
                    # the job's own attempt count: one round trip, no read first.
                    fails = [
                        FailItem(d.priority, d.local_id, batch[caller].source, a.append_custom_status,
                                 a.retry_delay_ms if a.retry_delay_ms > 0 else None)
                        for caller, pairs in owners for d, a in pairs
                    ]
                    op = partial(_ack_failed, queue=queue, items=fails, delays=config.retry.delay_table())
                    count = len(fails)
                else:
                    items = [
                        AckItem(d.priority, d.local_id, batch[caller].source, a.append_custom_status)
                        for caller, pairs in owners for d, a in pairs
                    ]
                    op = partial(_ack_succeeded, queue=queue, items=items)
                    count = len(items)
                try:
                    applied = self._on_shard(backend, op)
                    if len(applied) != count:
                        raise PinLaterError(f"shard {shard_id} answered {len(applied)} of {count} ACKs")
                except QueueDeleted:
                    applied = [False] * count  # its jobs are gone with it: stale, as where its storage is empty
                except PinLaterError as exc:
                    # Unreachable, or failed there: either way these are not
                    # known to be applied, and every transition is safe to repeat.
                    for caller, _ in owners:
                        outcomes[caller, shard_id, failures] = exc
                    continue
                start = 0
                for caller, pairs in owners:
                    outcomes[caller, shard_id, failures] = applied[start : start + len(pairs)]
                    start += len(pairs)
        done = {False: 0, True: 0}
        out = []
        for caller, prepared in enumerate(batch):
            result = AckResult()
            errors: list[str] = []
            for failures, groups in ((False, prepared.succeeded), (True, prepared.failed)):
                for backend, pairs in groups:
                    outcome = outcomes[caller, backend.shard_id, failures]
                    if isinstance(outcome, PinLaterError):
                        errors.append(f"shard {backend.shard_id}: {len(pairs)} jobs ({outcome})")
                        cause = f"shard {backend.shard_id}: {outcome}"
                        for d, _ in pairs:
                            result.unapplied[str(d)] = cause
                        continue
                    for (d, _), ok in zip(pairs, outcome, strict=True):
                        (result.acked if ok else result.stale).append(str(d))
                    done[failures] += sum(outcome)
            out.append(AckOutcome(result, errors))
        self.counters.add(queue, counters.SUCCEEDED, done[False])
        self.counters.add(queue, counters.FAILED, done[True])
        return out

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
            self._apply(backend, pairs, partial(_checkpoint, queue=queue, items=items), result, errors)
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
        groups: dict[str, list] = {}  # type: ignore[type-arg]
        for entry in entries:
            d = JobDescriptor.parse(entry.descriptor)
            if d.queue != queue:
                raise InvalidRequest(f"descriptor {entry.descriptor!r} is not in queue {queue!r}")
            check_priority(config, d.priority)
            group = groups.get(d.shard)
            if group is None:
                self.shards.get(d.shard)  # a shard of the set, or InvalidRequest
                group = groups[d.shard] = []
            group.append((d, entry))
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
        except QueueDeleted:
            applied = [False] * len(pairs)  # its jobs are gone with it: stale
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


    # -- operator actions (QueueAdmin) ---------------------------------------------------
    def retry_failed(
        self,
        queue: str,
        *,
        priority: int | None = None,
        attempts: int = 1,
        run_after_ms: int | None = None,
        limit: int = 1000,
    ) -> int:
        """FAILED -> PENDING with ``attempts`` granted, up to ``limit`` jobs."""
        return self._admin.retry_failed(
            queue, priority=priority, attempts=attempts, run_after_ms=run_after_ms, limit=limit
        )

    def delete_jobs(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        body_regex: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Deletes up to ``limit`` jobs in ``state`` (optionally only those
        whose body matches ``body_regex``, all found before any is deleted)."""
        return self._admin.delete_jobs(queue, state, priority=priority, body_regex=body_regex, limit=limit)

    # -- reads (Inspector) ---------------------------------------------------------------
    def lookup(self, descriptors: Sequence[str], *, include_body: bool = False) -> dict[str, JobInfo]:
        """Jobs by descriptor; unknown descriptors (and queues) are left out."""
        return self._inspector.lookup(descriptors, include_body=include_body)

    def count(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        """Jobs in ``state`` over every healthy shard. For PENDING, ``future``
        picks jobs whose run_after is still ahead instead of runnable ones."""
        return self._inspector.count(queue, state, priority=priority, future=future, body_regex=body_regex)

    def count_by_shard(self, queue: str) -> dict[str, dict[str, int]]:
        """Per healthy shard: the queue's jobs by state (pending split into now and future)."""
        return self._inspector.count_by_shard(queue)

    def scan(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        continuation: str = "0",
        limit: int = 100,
        body_regex: str | None = None,
        include_body: bool = False,
    ) -> ScanResult:
        """Jobs in ``state``, newest first, one page at a time; pass the
        returned continuation to get the next page, until it is CONTINUATION_END."""
        return self._inspector.scan(
            queue, state, priority=priority, future=future, continuation=continuation, limit=limit,
            body_regex=body_regex, include_body=include_body,
        )

    # -- for operators' tools: dashboard, monitor, CLI, demos ----------------------------------
    def shard_ids(self) -> list[str]:
        """Every shard's id, in configuration order."""
        return self.shards.ids

    def shard_status(self, *, probe: bool = False) -> dict[str, ShardHealth]:
        """Each shard's health as the prober sees it (after pinging every shard now, with ``probe``)."""
        if probe:
            self.shards.probe_once()
        return self.shards.status()

    def queue_configs(self, names: Iterable[str] | None = None) -> dict[str, QueueConfig]:
        """Every queue's config (or those of ``names`` that exist), read now; a damaged one is left out."""
        return self._admin.queue_configs(names)

    def queue_config_texts(self) -> dict[str, str | bytes]:
        """Every queue's stored config text, damaged ones included."""
        return self._admin.queue_config_texts()

    def count_on_shard(
        self, shard_id: str, queue: str, priority: int, state: JobState | str | int, future: bool = False
    ) -> int:
        """Jobs in ``state`` of one (queue, priority) on one shard."""
        return self._inspector.count_on_shard(shard_id, queue, priority, state, future)

    def oldest_pending(self, shard_id: str, queue: str, priority: int) -> JobInfo | None:
        """The oldest runnable pending job of one (queue, priority) on one shard, without its body."""
        return self._inspector.oldest_pending(shard_id, queue, priority)

    def shard_now_ms(self, shard_id: str | None = None) -> int:
        """A shard's own clock, the one its jobs' times are on (default: the first shard's)."""
        return self._inspector.shard_now_ms(shard_id or self.shards.ids[0])

    def recent_rates(self, minutes: int = 5) -> dict[str, dict[str, float]]:
        """queue -> event -> events per second over the last ``minutes`` minutes and the current one."""
        return counters.recent_rates(self.control, minutes)

    def recent_totals(self, minutes: int = 60) -> dict[str, dict[str, int]]:
        """queue -> event -> events counted in the last ``minutes`` minutes."""
        return counters.recent_totals(self.control, minutes)

    def minute_series(
        self, queues: Collection[str] | None = None, minutes: int = 60, now: float | None = None
    ) -> dict[str, dict[str, list[int]]]:
        """queue -> event -> events in each of the last ``minutes`` minutes, oldest first."""
        return counters.minute_series(self.control, queues, minutes, now)

    def expire_claims(self, shard_id: str, config: QueueConfig, priority: int, limit: int) -> ExpiredClaims:
        """The monitor's step: up to ``limit`` timed-out claims on one shard re-pended or failed."""
        return self._admin.expire_claims(shard_id, config, priority, limit)

    def collect_finished(self, shard_id: str, config: QueueConfig, priority: int, state: JobState, limit: int) -> int:
        """The monitor's step: deletes up to ``limit`` finished jobs past their retention on one shard."""
        return self._admin.collect_finished(shard_id, config, priority, state, limit)


# The backend calls of ack and checkpoint, as functions of the backend (for
# ShardSet.call) whose other arguments functools.partial binds.
def _ack_succeeded(backend: ShardBackend, queue: str, items: list[AckItem]) -> list[bool]:
    return backend.ack_succeeded(queue, items)


def _ack_failed(backend: ShardBackend, queue: str, items: list[FailItem], delays: Sequence[int]) -> list[bool]:
    return backend.ack_failed(queue, items, delays)


def _checkpoint(backend: ShardBackend, queue: str, items: list[CheckpointItem]) -> list[bool]:
    return backend.checkpoint(queue, items)


def connect(settings: Settings | None = None, source: str | None = None) -> PinLaterClient:
    """A client for the given (or environment's) settings: the Thrift client
    of the servers in ``PINLATER_SERVERS`` when set, else the in-process
    service. Both have the same client methods and model types."""
    settings = settings or Settings.from_env()
    if settings.servers:
        from pinlater.thrift_client import ThriftClient

        return ThriftClient.from_settings(settings, source)
    return JobService.from_settings(settings, source)
