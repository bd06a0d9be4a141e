"""The remote client: the JobService client methods over PinLater Thrift.

``ThriftClient`` has the same client methods, signatures and model types as
``JobService``, so application code switches between in-process and remote
by configuration alone (``PINLATER_SERVERS``, see ``pinlater.connect``).

Failover and retries: each call goes to the servers in turn (round robin,
servers that just failed last) until one takes it. A call that never
reached a server is retried for every method. A call whose reply was lost
is retried (with backoff, by tenacity) only where running it twice is
harmless: reads, ACKs, checkpoints, queue creation and deletion, dry-run
dequeues, and enqueues that carry an ``idempotency_key`` (sent as
``RequestContext.requestId``; the server answers a repeat with the first
call's descriptors). A plain enqueue, a dequeue, retry_failed and
delete_jobs raise ``CallFailed`` instead: they may have run (an enqueue's
is ``EnqueueCallFailed``, an ``EnqueueOutcomeUnknown`` as in process, as
is a server's own: errors carry their kind on the wire).

Beyond the published interface this client uses the server's extensions
(the EXTENSIONS block of ``pinlater.thrift``): ``create_queue`` with
options, ``queue_config`` and ``update_queue`` (and ``set_rate``, ``pause``,
``resume``) carry queue configs; ``ack`` and ``checkpoint`` get a per
descriptor answer, so stale ones are reported stale and, when a shard was
unreachable, ``AckNotApplied`` carries what was applied (retry only
``result.unapplied``). Dequeued jobs carry their claim, and an ``Ack`` or
``Checkpoint`` that gives it back (``claim=job.claim``) applies only to
that claim, as in-process. ``queue_config`` is cached for
``config_ttl_s``, as in ``JobService``.

Against a server without the extensions (a stock PinLater server answers
UNKNOWN_METHOD) the client logs a warning and falls back to the published
methods: ACKs and checkpoints then report every descriptor as acked (stale
ones cannot be told), a stock server's dequeued jobs have no claim
(``claim`` is "": their ACKs take the source check), ``queue_config`` is
the default config for the name, and ``create_queue`` with options, or
``update_queue``, raises InvalidRequest rather than silently drop them. It asks again after
``EXTENSION_RECHECK_S`` (servers get upgraded).

What the wire still does not carry:

* ``scan(include_body=True)`` fetches the bodies with a lookup.
* ``retry_failed``/``delete_jobs`` with ``priority=None`` (every priority)
  walk priorities 1, 2, ... until the server says there are no more.
* An ACK or checkpoint retried after a lost reply reports the jobs the
  lost call applied as stale (they changed nothing the second time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.errors import (
    AckNotApplied,
    EnqueueRejected,
    InvalidRequest,
    PriorityNotSupported,
    ShardConnectionFailed,
)
from pinlater.kit.tls import ClientTls
from pinlater.models import AckResult, BatchStatus, CancelResult, DequeuedJob, Enqueued, Job, JobInfo, ScanResult
from pinlater.observe import tracing
from pinlater.queue_config import QueueConfig
from pinlater.settings import Settings
from pinlater.states import JobState
from pinlater.thrift import convert, idl
from pinlater.thrift.calling import WireCalls
from pinlater.thrift.pool import CallFailed, EnqueueCallFailed, ServerUnavailable, UnknownMethod
from pinlater.validation import check_key, check_unique

__all__ = ["CallFailed", "EnqueueCallFailed", "ServerUnavailable", "ThriftClient", "UnknownMethod"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_PRIORITIES = 100


class ThriftClient(WireCalls, PinLaterClient):
    def __init__(
        self,
        servers: Sequence[str],
        *,
        source: str | None = None,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        retries: int = 3,
        retry_deadline_s: float = 30.0,
        pool_size: int = 8,
        default_priorities: int = 3,
        config_ttl_s: float = 1.0,
        tls: ClientTls | None = None,
    ) -> None:
        """``tls``: speak TLS to the servers (PINLATER_CLIENT_TLS_*)."""
        super().__init__(
            servers, source=source, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, retries=retries,
            retry_deadline_s=retry_deadline_s, pool_size=pool_size, tls=tls,
        )
        self.default_priorities = default_priorities
        self.config_ttl_s = config_ttl_s
        self._config_cache: dict[str, tuple[float, QueueConfig]] = {}

    @classmethod
    def from_settings(cls, settings: Settings | None = None, source: str | None = None) -> ThriftClient:
        settings = settings or Settings.from_env()
        tracing.configure()
        return cls(
            settings.servers,
            source=source,
            timeout_s=settings.client_timeout_s,
            default_priorities=settings.default_priorities,
            config_ttl_s=settings.config_ttl_s,
            tls=settings.client_tls,
        )

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> ThriftClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cache_config(self, config: QueueConfig) -> QueueConfig:
        with self._lock:
            self._config_cache[config.name] = (time.monotonic(), config)
        return config

    # -- queues ------------------------------------------------------------------------
    @declared(PinLaterClient.create_queue)
    def create_queue(self, a: Call) -> QueueConfig:
        """Idempotent: an existing queue keeps its config, which is returned."""
        name = a.name
        wire = idl.PinLaterQueueConfig(
            name=name,
            priorities=a.priorities,
            maxDequeueRate=a.max_dequeue_rate,
            claimTimeoutMillis=a.claim_timeout_ms,
            retryPolicy=None if a.retry is None else convert.retry_to_wire(a.retry),
            succeededRetentionMillis=a.succeeded_retention_ms,
            failedRetentionMillis=a.failed_retention_ms,
            maxRunning=a.max_running,
        )
        options = (
            a.priorities, a.max_dequeue_rate, a.claim_timeout_ms, a.retry, a.succeeded_retention_ms,
            a.failed_retention_ms, a.max_running,
        )

        def published() -> Any:
            if any(o is not None for o in options):
                raise InvalidRequest(
                    f"queue options for {name!r} cannot be sent: the server has no createQueueWithConfig "
                    "(not this project's server); create the queue with the pinlater CLI"
                )
            self._call("createQueue", idempotent=True, context=self._context(), name=name)
            return None

        created = self._extension("createQueueWithConfig", published, context=self._context(), config=wire)
        if created is None:
            return QueueConfig(name=name, priorities=self.default_priorities)
        return self._cache_config(convert.queue_config_from_wire(created))

    def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config from the server, cached for ``config_ttl_s``
        (``fresh`` reads it again). While no server answers, the last known
        config is used. Without the extension: the default config."""
        now = time.monotonic()
        with self._lock:
            cached = self._config_cache.get(name)
        if not fresh and cached is not None and now - cached[0] < self.config_ttl_s:
            return cached[1]
        try:
            wire = self._extension("getQueueConfig", lambda: None, context=self._context(), name=name)
        except ShardConnectionFailed as exc:
            if cached is None:
                raise
            log.warning("no PinLater server answered, using the cached config of %s: %s", name, exc)
            return cached[1]
        if wire is None:
            return QueueConfig(name=name, priorities=self.default_priorities)
        return self._cache_config(convert.queue_config_from_wire(wire))

    def update_queue(self, name: str, **changes: Any) -> QueueConfig:
        """As ``JobService.update_queue``: changes ``max_dequeue_rate`` (None:
        unlimited), ``paused``, ``max_running`` (None: no cap), ``key_rate``
        (None: unlimited), ``key_max_running`` (None: no cap),
        ``claim_timeout_ms``, ``retry``, ``succeeded_retention_ms``,
        ``failed_retention_ms``, ``unique_succeeded_ms`` at run time."""
        known = {
            "max_dequeue_rate", "paused", "claim_timeout_ms", "retry", "succeeded_retention_ms", "failed_retention_ms",
            "max_running", "key_rate", "key_max_running", "unique_succeeded_ms",
        }
        unknown = set(changes) - known
        if unknown:
            raise InvalidRequest(f"invalid queue change: {sorted(unknown)} cannot be changed over the wire")
        try:
            # Each change checked as the in-process service checks it, before
            # the wire's types could refuse it less clearly, or take "yes"
            # for true.
            QueueConfig(name=name).with_changes(**changes)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"invalid queue change: {exc}") from None
        rate = changes.get("max_dequeue_rate")
        retry = changes.get("retry")
        update = idl.PinLaterQueueConfigUpdate(
            name=name,
            maxDequeueRate=rate,
            unlimitedRate=True if "max_dequeue_rate" in changes and rate is None else None,
            paused=changes.get("paused"),
            claimTimeoutMillis=changes.get("claim_timeout_ms"),
            retryPolicy=None if retry is None else convert.retry_to_wire(retry),
            succeededRetentionMillis=changes.get("succeeded_retention_ms"),
            failedRetentionMillis=changes.get("failed_retention_ms"),
            uniqueSucceededMillis=changes.get("unique_succeeded_ms"),
            maxRunning=changes.get("max_running"),
            unlimitedRunning=True if "max_running" in changes and changes["max_running"] is None else None,
            keyRate=changes.get("key_rate"),
            unlimitedKeyRate=True if "key_rate" in changes and changes["key_rate"] is None else None,
            keyMaxRunning=changes.get("key_max_running"),
            unlimitedKeyRunning=(True if "key_max_running" in changes and changes["key_max_running"] is None
                                 else None),
        )

        def published() -> Any:
            raise InvalidRequest(
                "the server has no updateQueueConfig (not this project's server): "
                "change the queue with the pinlater CLI"
            )

        wire = self._extension("updateQueueConfig", published, context=self._context(), update=update)
        return self._cache_config(convert.queue_config_from_wire(wire))

    def delete_queue(self, name: str, password: str | None) -> None:
        self._call("deleteQueue", idempotent=True, context=self._context(), name=name, password=password)
        with self._lock:
            self._config_cache.pop(name, None)

    def queue_names(self) -> set[str]:
        return set(self._call("getQueueNames", idempotent=True, context=self._context()))

    # -- jobs ---------------------------------------------------------------------------
    @declared(PinLaterClient.enqueue)
    def enqueue(self, a: Call) -> Enqueued:
        for job in a.jobs:
            # Text the wire cannot carry (a lone surrogate) refused as the
            # service refuses it, not as the codec's error.
            if job.key != "":
                check_key(job.key, EnqueueRejected)
            if job.unique != "":
                check_unique(job.unique, EnqueueRejected)
        request = idl.PinLaterBatchEnqueueRequest(queueName=a.queue, jobs=[convert.job_to_wire(j) for j in a.jobs],
                                                  batch=a.batch)
        try:
            response = self._call(
                "enqueueJobs",
                idempotent=bool(a.idempotency_key),
                context=self._context(request_id=a.idempotency_key or ""),
                request=request,
            )
        except CallFailed as exc:
            # Sent, and no reply (after the retries an idempotency key allows).
            raise EnqueueCallFailed(
                f"enqueue to {a.queue}: {exc.message}, so its {len(a.jobs)} job(s) may or may not be stored"
                + (" (send it again with the same idempotency_key)" if a.idempotency_key else "")
            ) from exc
        return Enqueued(response.jobDescriptors or [], getattr(response, "duplicates", None) or ())

    @declared(PinLaterClient.dequeue)
    def dequeue(self, a: Call) -> list[DequeuedJob]:
        acks = _acks_request(a) if a.succeeded or a.failed else None
        request = idl.PinLaterDequeueRequest(
            queueName=a.queue, limit=a.limit, jobAckRequest=acks, dryRun=a.dry_run, coverage=a.coverage
        )
        response = self._call(
            "dequeueJobs", idempotent=a.dry_run and acks is None, context=self._context(a.source), request=request
        )
        return convert.dequeued_from_wire(response)

    @declared(PinLaterClient.ack)
    def ack(self, a: Call) -> AckResult:
        request = _acks_request(a)
        context = self._context(a.source)

        def published() -> Any:
            self._call("ackDequeuedJobs", idempotent=True, context=context, request=request)
            return idl.PinLaterAckResult(acked=[ack.descriptor for ack in (*a.succeeded, *a.failed)])

        wire = self._extension("ackDequeuedJobsWithResult", published, context=context, request=request)
        return _checked(convert.ack_result_from_wire(wire), "ACKs")

    @declared(PinLaterClient.checkpoint)
    def checkpoint(self, a: Call) -> AckResult:
        request = idl.PinLaterCheckpointJobsRequest(
            queueName=a.queue, requests=[convert.checkpoint_to_wire(c) for c in a.checkpoints]
        )
        context = self._context(a.source)

        def published() -> Any:
            self._call("checkpointJobs", idempotent=True, context=context, request=request)
            return idl.PinLaterAckResult(acked=[c.descriptor for c in a.checkpoints])

        wire = self._extension("checkpointJobsWithResult", published, context=context, request=request)
        return _checked(convert.ack_result_from_wire(wire), "checkpoints")

    @declared(PinLaterClient.lookup)
    def lookup(self, a: Call) -> dict[str, JobInfo]:
        request = idl.PinLaterLookupJobRequest(jobDescriptors=list(a.descriptors), includeBody=a.include_body)
        found = self._call("lookupJobs", idempotent=True, context=self._context(), request=request)
        return {d: convert.info_from_wire(info) for d, info in (found or {}).items()}

    @declared(PinLaterClient.count)
    def count(self, a: Call) -> int:
        request = idl.PinLaterGetJobCountRequest(
            queueName=a.queue,
            jobState=int(JobState.parse(a.state)),
            priority=a.priority or None,
            countFutureJobs=a.future,
            bodyRegexToMatch=a.body_regex,
        )
        return int(self._call("getJobCount", idempotent=True, context=self._context(), request=request))

    @declared(PinLaterClient.scan)
    def scan(self, a: Call) -> ScanResult:
        request = idl.PinLaterScanJobsRequest(
            queueName=a.queue,
            jobState=int(JobState.parse(a.state)),
            priority=a.priority or None,
            scanFutureJobs=a.future,
            continuation=a.continuation,
            limit=a.limit,
            bodyRegexToMatch=a.body_regex,
        )
        response = self._call("scanJobs", idempotent=True, context=self._context(), request=request)
        jobs = [convert.info_from_wire(w) for w in response.scannedJobs or []]
        if a.include_body and jobs:
            bodies = self.lookup([j.descriptor for j in jobs], include_body=True)
            jobs = [replace(j, body=bodies[j.descriptor].body if j.descriptor in bodies else None) for j in jobs]
        return ScanResult(jobs, response.continuation)

    # -- operator actions ---------------------------------------------------------------------
    def _each_priority(self, priority: int | None, limit: int, run: Any) -> int:
        if priority is not None:
            return int(run(priority, limit))
        done = 0
        for p in range(1, MAX_PRIORITIES + 1):
            if p > 1 and done >= limit:
                break
            try:
                done += int(run(p, limit - done if p > 1 else limit))
            except PriorityNotSupported:
                if p == 1:
                    raise
                break
        return done

    @declared(PinLaterClient.retry_failed)
    def retry_failed(self, a: Call) -> int:
        def run(p: int, n: int) -> int:
            request = idl.PinLaterRetryFailedJobsRequest(
                queueName=a.queue, priority=p, attemptsToAllow=a.attempts, runAfterTimestampMillis=a.run_after_ms,
                limit=n,
            )
            return int(self._call("retryFailedJobs", idempotent=False, context=self._context(), request=request))

        return self._each_priority(a.priority, a.limit, run)

    @declared(PinLaterClient.cancel)
    def cancel(self, a: Call) -> CancelResult:
        request = idl.PinLaterCancelJobsRequest(queueName=a.queue, jobDescriptors=list(a.descriptors))

        def published() -> Any:
            raise InvalidRequest("jobs cannot be cancelled: the server has no cancelJobs (not this project's "
                                 "server); cancel them with the pinlater CLI")

        # Safe to repeat: a job cancelled by a lost first try is reported finished.
        wire = self._extension("cancelJobs", published, context=self._context(), request=request)
        return convert.cancel_result_from_wire(wire)

    def _batches(self, method: str, *, idempotent: bool = True, **kwargs: Any) -> Any:
        try:
            return self._call(method, idempotent=idempotent, context=self._context(), **kwargs)
        except UnknownMethod:
            raise InvalidRequest(f"the server has no {method} (not this project's server): batches need it") from None

    def create_batch(
        self, callback_queue: str, callback: Job, *, description: str = "", batch: str | None = None
    ) -> str:
        request = idl.PinLaterCreateBatchRequest(queueName=callback_queue, callback=convert.job_to_wire(callback),
                                                 description=description or None, batch=batch)
        # Not sent twice: a lost first try would leave a batch nobody knows of.
        return str(self._batches("createBatch", idempotent=False, request=request))

    def seal_batch(self, batch: str) -> BatchStatus:
        # Safe to repeat: sealing a sealed batch changes nothing.
        return convert.batch_status_from_wire(self._batches("sealBatch", batch=batch))

    def batch_status(self, batch: str) -> BatchStatus:
        return convert.batch_status_from_wire(self._batches("getBatch", batch=batch))

    def cancel_batch(self, batch: str) -> CancelResult:
        return convert.cancel_result_from_wire(self._batches("cancelBatch", batch=batch))

    @declared(PinLaterClient.delete_jobs)
    def delete_jobs(self, a: Call) -> int:
        wire_state = int(JobState.parse(a.state))

        def run(p: int, n: int) -> int:
            request = idl.PinLaterDeleteJobsRequest(
                queueName=a.queue, jobState=wire_state, priority=p, bodyRegexToMatch=a.body_regex, limit=n
            )
            return int(self._call("deleteJobs", idempotent=False, context=self._context(), request=request))

        return self._each_priority(a.priority, a.limit, run)


def _acks_request(a: Call) -> Any:
    return idl.PinLaterJobAckRequest(
        queueName=a.queue, jobsSucceeded=convert.acks_to_wire(a.succeeded), jobsFailed=convert.acks_to_wire(a.failed)
    )


def _checked(result: AckResult, what: str) -> AckResult:
    """Raises AckNotApplied, as JobService does, when part was not applied."""
    if result.unapplied:
        causes = sorted(set(result.unapplied.values()))
        raise AckNotApplied(
            f"{len(result.unapplied)} {what} not applied (retry them): {'; '.join(causes)}", result
        )
    return result
