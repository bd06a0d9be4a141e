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
delete_jobs raise ``CallFailed`` instead: they may have run.

What the wire cannot carry, and how this client handles it:

* ``create_queue`` takes only a name: other options raise InvalidRequest
  (set them with the ``pinlater`` CLI); the QueueConfig returned is the
  default one for that name, not read back from the server.
* ACKs and checkpoints return nothing: the AckResult lists every
  descriptor as acked (the server logs stale ones).
* Dequeued jobs carry no claim string (``claim`` is "").
* ``scan(include_body=True)`` fetches the bodies with a lookup.
* ``retry_failed``/``delete_jobs`` with ``priority=None`` (every priority)
  walk priorities 1, 2, ... until the server says there are no more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential, wait_random

from pinlater.errors import InvalidRequest, PinLaterError, PriorityNotSupported
from pinlater.models import Ack, AckResult, Checkpoint, DequeuedJob, Job, JobInfo, ScanResult
from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy
from pinlater.settings import Settings, default_source
from pinlater.states import JobState
from pinlater.thrift import convert, idl, service
from pinlater.thrift.pool import CallFailed, ServerPool, ServerUnavailable
from pinlater.validation import check_source

__all__ = ["CallFailed", "ServerUnavailable", "ThriftClient"]

MAX_PRIORITIES = 100


class ThriftClient:
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
    ) -> None:
        self.source = check_source(source or default_source())
        self.servers = list(servers)
        self.retries = retries
        self.retry_deadline_s = retry_deadline_s
        self.default_priorities = default_priorities
        self._pool = ServerPool(
            self.servers, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, pool_size=pool_size
        )

    @classmethod
    def from_settings(cls, settings: Settings | None = None, source: str | None = None) -> ThriftClient:
        settings = settings or Settings.from_env()
        return cls(
            settings.servers,
            source=source,
            timeout_s=settings.client_timeout_s,
            default_priorities=settings.default_priorities,
        )

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> ThriftClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------
    def _context(self, source: str | None = None, request_id: str = "") -> Any:
        return idl.RequestContext(source=check_source(source or self.source), requestId=request_id)

    def _call(self, method: str, /, *, idempotent: bool, **kwargs: Any) -> Any:
        args = getattr(service, method + "_args")(**kwargs)
        result_cls = getattr(service, method + "_result")

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, ServerUnavailable) or (idempotent and isinstance(exc, CallFailed))

        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1) | stop_after_delay(self.retry_deadline_s),
            wait=wait_exponential(multiplier=0.05, max=1.0) + wait_random(0, 0.05),
            retry=retry_if_exception(retryable),
            reraise=True,
        )
        result = retrying(lambda: self._pool.call(method, args, result_cls()))
        if getattr(result, "e", None) is not None:
            raise convert.from_wire_error(result.e)
        success = getattr(result, "success", None)
        if success is None and "success" in result.__dict__:
            raise PinLaterError(f"{method}: the server sent an empty reply")
        return success

    # -- queues ------------------------------------------------------------------------
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
        """Idempotent. The wire's createQueue takes a name only."""
        options = (priorities, max_dequeue_rate, claim_timeout_ms, retry, succeeded_retention_ms, failed_retention_ms)
        if any(o is not None for o in options):
            raise InvalidRequest("queue options are not part of the wire contract: set them with the pinlater CLI")
        self._call("createQueue", idempotent=True, context=self._context(), name=name)
        return QueueConfig(name=name, priorities=self.default_priorities)

    def delete_queue(self, name: str, password: str | None) -> None:
        self._call("deleteQueue", idempotent=True, context=self._context(), name=name, password=password)

    def queue_names(self) -> set[str]:
        return set(self._call("getQueueNames", idempotent=True, context=self._context()))

    # -- jobs ---------------------------------------------------------------------------
    def enqueue(self, queue: str, jobs: Sequence[Job], *, idempotency_key: str | None = None) -> list[str]:
        request = idl.PinLaterEnqueueRequest(queueName=queue, jobs=[convert.job_to_wire(j) for j in jobs])
        response = self._call(
            "enqueueJobs",
            idempotent=bool(idempotency_key),
            context=self._context(request_id=idempotency_key or ""),
            request=request,
        )
        return list(response.jobDescriptors or [])

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
        acks = None
        if succeeded or failed:
            acks = idl.PinLaterJobAckRequest(
                queueName=queue, jobsSucceeded=convert.acks_to_wire(succeeded), jobsFailed=convert.acks_to_wire(failed)
            )
        request = idl.PinLaterDequeueRequest(
            queueName=queue, limit=limit, jobAckRequest=acks, dryRun=dry_run, coverage=coverage
        )
        response = self._call(
            "dequeueJobs", idempotent=dry_run and acks is None, context=self._context(source), request=request
        )
        return convert.dequeued_from_wire(response)

    def ack(
        self,
        queue: str,
        *,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
        source: str | None = None,
    ) -> AckResult:
        request = idl.PinLaterJobAckRequest(
            queueName=queue, jobsSucceeded=convert.acks_to_wire(succeeded), jobsFailed=convert.acks_to_wire(failed)
        )
        self._call("ackDequeuedJobs", idempotent=True, context=self._context(source), request=request)
        return AckResult(acked=[a.descriptor for a in (*succeeded, *failed)])

    def checkpoint(
        self, queue: str, checkpoints: Sequence[Checkpoint], *, source: str | None = None
    ) -> AckResult:
        request = idl.PinLaterCheckpointJobsRequest(
            queueName=queue, requests=[convert.checkpoint_to_wire(c) for c in checkpoints]
        )
        self._call("checkpointJobs", idempotent=True, context=self._context(source), request=request)
        return AckResult(acked=[c.descriptor for c in checkpoints])

    def lookup(self, descriptors: Sequence[str], *, include_body: bool = False) -> dict[str, JobInfo]:
        request = idl.PinLaterLookupJobRequest(jobDescriptors=list(descriptors), includeBody=include_body)
        found = self._call("lookupJobs", idempotent=True, context=self._context(), request=request)
        return {d: convert.info_from_wire(info) for d, info in (found or {}).items()}

    def count(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        request = idl.PinLaterGetJobCountRequest(
            queueName=queue,
            jobState=int(JobState.parse(state)),
            priority=priority or None,
            countFutureJobs=future,
            bodyRegexToMatch=body_regex,
        )
        return int(self._call("getJobCount", idempotent=True, context=self._context(), request=request))

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
        request = idl.PinLaterScanJobsRequest(
            queueName=queue,
            jobState=int(JobState.parse(state)),
            priority=priority or None,
            scanFutureJobs=future,
            continuation=continuation,
            limit=limit,
            bodyRegexToMatch=body_regex,
        )
        response = self._call("scanJobs", idempotent=True, context=self._context(), request=request)
        jobs = [convert.info_from_wire(w) for w in response.scannedJobs or []]
        if include_body and jobs:
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

    def retry_failed(
        self,
        queue: str,
        *,
        priority: int | None = None,
        attempts: int = 1,
        run_after_ms: int | None = None,
        limit: int = 1000,
    ) -> int:
        def run(p: int, n: int) -> int:
            request = idl.PinLaterRetryFailedJobsRequest(
                queueName=queue, priority=p, attemptsToAllow=attempts, runAfterTimestampMillis=run_after_ms, limit=n
            )
            return int(self._call("retryFailedJobs", idempotent=False, context=self._context(), request=request))

        return self._each_priority(priority, limit, run)

    def delete_jobs(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        body_regex: str | None = None,
        limit: int = 1000,
    ) -> int:
        wire_state = int(JobState.parse(state))

        def run(p: int, n: int) -> int:
            request = idl.PinLaterDeleteJobsRequest(
                queueName=queue, jobState=wire_state, priority=p, bodyRegexToMatch=body_regex, limit=n
            )
            return int(self._call("deleteJobs", idempotent=False, context=self._context(), request=request))

        return self._each_priority(priority, limit, run)
