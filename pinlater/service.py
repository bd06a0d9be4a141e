"""The job service's client API, in-process.

``JobService`` is what application code and the Thrift server both call:
the client interface (``PinLaterClient``) over a ``Core`` of shards,
control store and caches (``pinlater.engine.core``). It validates input, picks
shards, applies queue configs (retry policy, rate limit) and routes each
descriptor to its shard; the shard backends make the transitions
atomically. Enqueue, dequeue, ACK and checkpoint are here, over the same
steps the server's coalescer batches (``pinlater.engine.writes``,
``pinlater.engine.settle``); queue administration and the reads (lookup,
count, scan) are the mixins it is made of (``pinlater.engine.admin``,
``pinlater.engine.reads``).

The operators' reads and maintenance (shard status, per-shard counts, the
oldest pending job, event rates, the monitor's steps) are on another face
of the same core, ``operators`` (``pinlater.operators.Operators``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.descriptor import JobDescriptor, descriptor_prefix
from pinlater.engine.admin import QueueAdminMixin
from pinlater.engine.batch_admin import BatchesMixin
from pinlater.engine.core import Core
from pinlater.engine.idempotency import enqueue_once
from pinlater.engine.priority_walk import walk_priorities
from pinlater.engine.reads import ReadsMixin
from pinlater.engine.settle import Share, free_ended, prepare_acks, route, settle, settle_acks
from pinlater.engine.slots import Ended, counts_claims
from pinlater.engine.writes import check_dequeue, enqueue_items, store_items
from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.models import CANCELLED_STATUS, Ack, AckResult, Checkpoint, DequeuedJob, Enqueued, Job
from pinlater.observe import tracing
from pinlater.operators import Operators
from pinlater.queue_config import QueueConfig
from pinlater.settings import Settings, default_source
from pinlater.states import JobState
from pinlater.stores.base import CheckpointItem, Claims, ShardBackend, ShardOutcomeUnknown, ShardUnavailable
from pinlater.validation import (
    check_attempts,
    check_batch,
    check_batch_id,
    check_claims,
    check_source,
    check_status,
    check_timestamp,
)

log = logging.getLogger(__name__)

# The rounds of a dequeue under per-key limits (``_collect_keyed``): each
# reads want * a + b keys to serve; a round after the first comes only when
# a shard met a key it had no allowance for.
KEY_ROUNDS = ((1, 1), (2, 4), (4, 16), (8, 64))


class JobService(QueueAdminMixin, ReadsMixin, BatchesMixin, PinLaterClient):
    """The in-process client (``PinLaterClient``) over a ``Core``; its
    ``operators`` are the operators' API over the same core."""

    queue_config: Callable[..., QueueConfig]  # the config cache's read (set per instance)

    def __init__(self, core: Core, source: str | None = None, *, owns_core: bool = False) -> None:
        """``owns_core``: ``close`` closes the core too (several services,
        each with its own source, may share one core)."""
        self.core = core
        self.settings = core.settings
        self.source = check_source(source or default_source())
        self.operators = Operators(core)
        self._owns_core = owns_core
        # The queue's config, cached for ``config_ttl_s`` so that a change by
        # any process is seen everywhere within that time: the cache's own read.
        self.queue_config = core.configs.get

    @classmethod
    def from_settings(cls, settings: Settings | None = None, source: str | None = None) -> JobService:
        return cls(Core.from_settings(settings), source, owns_core=True)

    def close(self) -> None:
        if self._owns_core:
            self.core.close()

    def __enter__(self) -> JobService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- enqueue -------------------------------------------------------------------
    # Each public call is a span when tracing is on; the test of ``ON`` is
    # written out in each, where a decorator's generic wrapper cost 0.6 µs a call.
    def enqueue(
        self, queue: str, jobs: Sequence[Job], *, idempotency_key: str | None = None, batch: str | None = None
    ) -> Enqueued:
        """Stores the jobs on one healthy shard chosen at random (free
        sharding) and returns their descriptors in order. All or nothing.
        With ``idempotency_key``, a repeat within the idempotency window
        returns the first call's descriptors, creates nothing and joins
        nothing to a batch. Jobs with
        unique keys (``Job.unique``) go to their keys' shards; one whose key
        is held stores nothing and answers the holder's descriptor (its
        index in ``Enqueued.duplicates``). With ``batch``, the jobs stored
        join that batch (``create_batch``)."""
        if batch is not None:
            check_batch_id(batch)
            self._batch_before_enqueue(queue, batch)
        if tracing.ON:
            with tracing.span("pinlater enqueue", {"pinlater.queue": queue}):
                return self._enqueue(queue, jobs, idempotency_key, batch)
        return self._enqueue(queue, jobs, idempotency_key, batch)

    def _enqueue(self, queue: str, jobs: Sequence[Job], idempotency_key: str | None, batch: str | None) -> Enqueued:
        config = self.queue_config(queue)
        if not jobs:
            return Enqueued()

        def store() -> Enqueued:
            stored = store_items(self.core, queue, enqueue_items(self.core, queue, jobs, config))
            if batch is not None:
                self._join(queue, batch, stored)
            return stored

        if idempotency_key is not None:
            # The join is part of the unit the key stands for: a repeat
            # answers the first call's jobs and joins nothing (they are in
            # the first call's batch), and a join refused frees the key
            # with the jobs withdrawn, so the call can be sent again whole.
            stored = enqueue_once(self.core.control, queue, idempotency_key, self.settings.idempotency_window_ms,
                                  store)
            # A repeat answers the first call's descriptors, not its duplicates.
            return stored if isinstance(stored, Enqueued) else Enqueued(stored)
        return store()

    # -- dequeue -------------------------------------------------------------------
    @declared(PinLaterClient.dequeue)
    def dequeue(self, a: Call) -> list[DequeuedJob]:
        """Claims up to ``limit`` runnable jobs, highest priority first,
        visiting shards in random order. ACKs riding along are applied first.
        Raises DequeueRateLimited when the queue's rate allows nothing now.
        A shard that fails is left out: the jobs claimed on the others are
        returned, and its error is raised only if there are none (never for
        an unavailable shard, which is merely out of rotation)."""
        args = (a.queue, a.limit, a.source, a.dry_run, a.coverage, a.succeeded, a.failed)
        if tracing.ON:
            with tracing.span("pinlater dequeue", {"pinlater.queue": a.queue}):
                return self._dequeue(*args)
        return self._dequeue(*args)

    def _dequeue(
        self, queue: str, limit: int, source: str | None, dry_run: bool, coverage: float,
        succeeded: Sequence[Ack], failed: Sequence[Ack],
    ) -> list[DequeuedJob]:
        source = check_source(source or self.source)
        # The riding ACKs' slots (of a capped queue) are this dequeue's to
        # claim with first, or freed below if it claims with none.
        ended: list[Ended] = []
        try:
            if succeeded or failed:
                prepared = prepare_acks(self.core, queue, succeeded, failed, source)
                settle_acks(self.core, [prepared], held=ended)[0].result_of_acks()
                # Per-key slots are freed at the claim's own store step.
                self.core.key_slots.free(prepared.config, ended)
            return self._dequeue_claiming(queue, limit, source, dry_run, coverage, ended)
        finally:
            if ended:
                self.core.slots.free(self.queue_config(queue), ended)

    def _dequeue_claiming(
        self, queue: str, limit: int, source: str, dry_run: bool, coverage: float, ended: list[Ended]
    ) -> list[DequeuedJob]:
        config = check_dequeue(self.core, queue, limit, coverage)
        shards = self.core.shards.require_healthy()
        shards = shards[: max(1, math.ceil(coverage * len(shards)))]
        jobs: list[DequeuedJob] = []
        if dry_run:
            jobs, error = self._collect(queue, config, shards, limit, "peek",
                                        lambda b, ps, n, ahead: b.peek(queue, ps, n, ahead))
        else:
            limiter = self.core.rate_limiter
            granted = limiter.take(config, limit)
            doubt: list[str] = []  # shards that may have claimed jobs they could not hand over

            counted = config.max_running is not None  # running jobs counted: pinlater.engine.slots

            def collect(n: int, token: str | None = None) -> tuple[list[DequeuedJob], PinLaterError | None]:
                if config.key_rate is not None or config.key_max_running is not None:
                    return self._collect_keyed(queue, config, shards, n, source, token, doubt)
                return self._collect(
                    queue, config, shards, n, "dequeue",
                    lambda b, ps, m, ahead: b.dequeue(queue, ps, m, source, ahead, token=token, counted=counted),
                    doubt=doubt)

            try:
                if config.max_running is None:
                    jobs, error = collect(granted)
                else:
                    riding, ended[:] = list(ended), []
                    jobs, error = self.core.slots.claim(config, granted, collect, riding, doubt)
            finally:
                limiter.give_back(config, granted - len(jobs))
        # Jobs claimed are always handed over, a shard failing beside them or
        # not; with none, the caller learns why (an unavailable shard is only
        # out of rotation, as if it were not there).
        if error is not None and not jobs:
            raise error
        return jobs

    def _collect_keyed(
        self, queue: str, config: QueueConfig, shards: list[ShardBackend], n: int, source: str, token: str | None,
        doubt: list[str],
    ) -> tuple[list[DequeuedJob], PinLaterError | None]:
        """A dequeue under per-key limits, in rounds: the keys the shards
        would serve first (one read per shard), their allowances (rate
        tokens, per-key slots), then the claims with them; what a key did
        not use goes back. A shard that met a key it had no allowance for
        (another dequeue served the keys read) stops there, keeping that
        key's turn: the next round starts with it and reads more keys, as
        dequeues that read the same first keys at once serve them all but
        one."""
        jobs: list[DequeuedJob] = []
        error: PinLaterError | None = None
        stopped: list[str] = []
        for spare in KEY_ROUNDS:
            want = n - len(jobs)
            try:
                got, error, stopped = self._key_round(queue, config, shards, want, want * spare[0] + spare[1],
                                                      source, token, stopped, doubt)
            except PinLaterError as exc:
                if not jobs:
                    raise
                # The jobs of the rounds before are claimed: handed over, whatever
                # this round met (the control store gone, its reply lost).
                return jobs, exc
            jobs += got
            if len(jobs) >= n or not stopped or error is not None or doubt:
                break
        return jobs, error

    def _key_round(
        self, queue: str, config: QueueConfig, shards: list[ShardBackend], n: int, read: int, source: str,
        token: str | None, first: list[str], doubt: list[str],
    ) -> tuple[list[DequeuedJob], PinLaterError | None, list[str]]:
        call = self.core.shards.call
        priorities = range(1, config.priorities + 1)
        counted = config.max_running is not None or config.key_max_running is not None
        found = dict.fromkeys(first)
        for backend in shards:
            try:
                found.update(dict.fromkeys(call(backend, "lane_keys", queue,
                                                lambda b: b.lane_keys(queue, priorities, read))))
            except PinLaterError:
                continue  # the claims below meet it again, and say so
        keys = list(found)
        limiter = self.core.rate_limiter
        tokens = limiter.take_keys(config, keys, n) if config.key_rate is not None else dict.fromkeys(keys, n)
        used: dict[str, int] = {}
        jobs: list[DequeuedJob] = []
        stopped: list[str] = []

        def claim(allow: dict[str, int], claim_token: str | None) -> tuple[list[tuple[str, str]], PinLaterError | None]:
            nonlocal jobs
            left = dict(allow)
            keyed: list[str] = []
            jobs, error = self._collect(
                queue, config, shards, n, "dequeue",
                lambda b, ps, m, ahead: b.dequeue(queue, ps, m, source, ahead, token=claim_token, allow=left,
                                                  counted=counted),
                keyed, stopped, doubt)
            for key in keyed:
                if key:
                    used[key] = used.get(key, 0) + 1
            for key, a in allow.items():
                allow[key] = a - used.get(key, 0)
            return [(j.descriptor, k) for j, k in zip(jobs, keyed, strict=True)], error

        try:
            if config.key_max_running is None:
                _, error = claim(tokens, token)
            else:
                _, error = self.core.key_slots.claim(config, tokens, token, claim, doubt)
        finally:
            if config.key_rate is not None:
                limiter.give_back_keys(config, {k: t - used.get(k, 0) for k, t in tokens.items()})
        # Only a key it had no allowance for is worth another round.
        return jobs, error, [k for k in dict.fromkeys(stopped) if k not in tokens]

    def _collect(
        self,
        queue: str,
        config: QueueConfig,
        shards: list[ShardBackend],
        limit: int,
        op: str,
        take: Callable[[ShardBackend, Sequence[int], int, Sequence[int]], Claims],
        keys: list[str] | None = None,
        stopped: list[str] | None = None,
        doubt: list[str] | None = None,
    ) -> tuple[list[DequeuedJob], PinLaterError | None]:
        """The jobs found on ``shards``, and the first error of a shard that
        failed otherwise than by being unavailable (None if none did);
        ``keys`` gets each job's fairness key, in the same order,
        ``stopped`` the keys that ended a shard's call (``Claims.stopped_at``),
        and ``doubt`` the shards whose call may have claimed jobs it could
        not hand over (``ShardOutcomeUnknown``)."""
        # Priority-major across shards (a priority-1 job on any shard goes
        # before a priority-2 job on another), about one call per shard.
        shard_set = self.core.shards
        call = shard_set.call
        walk = walk_priorities(
            shards, config.priorities, limit,
            lambda backend, ps, n, ahead: call(backend, op, queue, lambda b: take(b, ps, n, ahead)),
        )
        error: PinLaterError | None = None
        for backend, exc in walk.failed:
            if doubt is not None and isinstance(exc, ShardOutcomeUnknown):
                doubt.append(backend.shard_id)
            # Its health and the store metrics have it already (ShardSet.call).
            shard_set.warn(backend.shard_id, "%s of %s went on without shard %s: %s", op, queue, backend.shard_id, exc)
            if error is None and not isinstance(exc, ShardUnavailable):
                error = exc
        # The descriptors' text from each shard's prefix: a dequeue hands out
        # several jobs per call, and a JobDescriptor made only to be printed
        # cost ~0.7 µs each.
        prefixes = {b.shard_id: descriptor_prefix(queue, b.shard_id) for b in shards}
        jobs = [
            DequeuedJob(
                f"{prefixes[backend.shard_id]}{c.priority}:{c.local_id}",
                c.body, c.attempts_allowed, c.attempts_remaining, c.claim, c.trace, c.run_after_ms or None,
            )
            for backend, c in walk.picked
        ]
        if keys is not None:
            keys += [c.key for _, c in walk.picked]
        if stopped is not None:
            stopped += walk.stopped
        return jobs, error

    # -- ack and checkpoint ------------------------------------------------------------
    @declared(PinLaterClient.ack)
    def ack(self, a: Call) -> AckResult:
        """Success ACKs -> SUCCEEDED; failure ACKs -> PENDING after the retry
        delay (the ACK's own, or the queue policy's), or FAILED at the last
        attempt. An ACK applies only to the claim it names (``Ack.claim``),
        or without one to a claim of ``source``; any other changes nothing
        and is reported stale (``pinlater.engine.settle``)."""
        args = (a.queue, a.succeeded, a.failed, a.source)
        if tracing.ON:
            with tracing.span("pinlater ack", {"pinlater.queue": a.queue}):
                return self._ack(*args)
        return self._ack(*args)

    def _ack(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack], source: str | None) -> AckResult:
        prepared = prepare_acks(self.core, queue, succeeded, failed, source or self.source)
        return settle_acks(self.core, [prepared])[0].result_of_acks()

    def checkpoint(
        self, queue: str, checkpoints: Sequence[Checkpoint], *, source: str | None = None
    ) -> AckResult:
        """Heartbeats (and optional changes) for running jobs held by each
        checkpoint's claim (``Checkpoint.claim``), or else by ``source``."""
        if tracing.ON:
            with tracing.span("pinlater checkpoint", {"pinlater.queue": queue}):
                return self._checkpoint(queue, checkpoints, source)
        return self._checkpoint(queue, checkpoints, source)

    def _checkpoint(self, queue: str, checkpoints: Sequence[Checkpoint], source: str | None) -> AckResult:
        source = check_source(source or self.source)
        config = self.queue_config(queue)
        check_batch(len(checkpoints), self.settings.max_jobs_per_call, "checkpoints")
        check_claims([c.claim for c in checkpoints])
        for c in checkpoints:
            if c.attempts_allowed is not None:
                check_attempts(c.attempts_allowed)
            check_timestamp(c.run_after_ms)
            if c.prepend_custom_status is not None:
                check_status(c.prepend_custom_status)
            if c.new_body is not None and len(c.new_body) > self.settings.max_body_bytes:
                raise InvalidRequest(f"new body is over {self.settings.max_body_bytes} bytes")
        share = Share()
        capped = counts_claims(config)
        tokens = self.core.slots.tokens_of(config, [
            str(JobDescriptor.parse(c.descriptor)) for c in checkpoints if c.move_to_pending and not c.claim
        ]) if config.max_running is not None else {}
        ended = settle(
            self.core, "checkpoint", queue, [route(self.core, queue, config, checkpoints)], [share],
            lambda _, d, c: CheckpointItem(d.priority, d.local_id, source, c.new_body, c.move_to_pending,
                                           c.run_after_ms, c.attempts_allowed, c.prepend_custom_status,
                                           c.claim or None),
            lambda b, items: b.checkpoint(queue, items),
            ends_claim=(lambda c: c.move_to_pending) if capped else None,
        )
        if ended:
            free_ended(self.core, config, [(d, token or tokens.get(d)) for d, token in ended])
        if share.result.stale:
            log.info("ignored %d stale checkpoints on %s from %s", len(share.result.stale), queue, source)
            share.result.cancelled.extend(self._cancelled(share.result.stale))
        return share.checked("checkpoints")

    def _cancelled(self, stale: Sequence[str]) -> list[str]:
        """Which of these stale descriptors name a job a cancel ended (read
        only for stale checkpoints, which are rare)."""
        try:
            found = self.lookup(stale)
        except PinLaterError as exc:
            log.warning("could not tell whether %d stale checkpoints were cancelled: %s", len(stale), exc)
            return []
        return [d for d in stale if (info := found.get(d)) is not None and info.state is JobState.FAILED
                and info.custom_status.endswith(CANCELLED_STATUS)]


def connect(settings: Settings | None = None, source: str | None = None) -> PinLaterClient:
    """A client for the given (or environment's) settings: the Thrift client
    of the servers in ``PINLATER_SERVERS`` when set, else the in-process
    service. Both have the same client methods and model types."""
    settings = settings or Settings.from_env()
    if settings.servers:
        from pinlater.thrift.client import ThriftClient

        return ThriftClient.from_settings(settings, source)
    return JobService.from_settings(settings, source)
