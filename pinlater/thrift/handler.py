"""The wire methods, each mapped onto the JobService: the twelve published
ones and this server's extensions (queue configs, ACK results; see the
EXTENSIONS block of pinlater.thrift).

Arguments arrive as decoded wire structs whose fields may be missing or of
the wrong kind (a peer may send anything that decodes); every such case ends
as a PinLaterError, which the server turns into a PinLaterException.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from pinlater.client_api import PinLaterClient
from pinlater.errors import AckNotApplied, InvalidRequest, PriorityNotSupported
from pinlater.limits import MAX_DURATION_MS, MAX_PRIORITIES
from pinlater.models import AckResult
from pinlater.observe import tracing
from pinlater.queue_config import validate_queue_name
from pinlater.service import JobService
from pinlater.states import JobState
from pinlater.thrift import convert, idl
from pinlater.thrift.coalesce import Coalescer
from pinlater.validation import check_source

log = logging.getLogger(__name__)


def _request(value: Any, kind: str) -> Any:
    if value is None:
        raise InvalidRequest(f"the {kind} argument is required")
    return value


def _state(value: Any) -> JobState:
    try:
        return JobState(value)
    except (ValueError, TypeError):
        raise InvalidRequest(f"jobState {value!r} is not a PinLaterJobState (0..3)") from None


def _int(value: Any, name: str, default: int | None = None) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"{name} must be an integer")
    return value


def _priority_or_1(value: Any) -> int:
    """retryFailedJobs and deleteJobs: one priority, 1 unless given."""
    priority = _int(value, "priority", 1)
    assert priority is not None
    if priority < 1:
        raise PriorityNotSupported(f"priority {priority} is not supported: priorities start at 1")
    return priority


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or any(item is None for item in value):
        raise InvalidRequest(f"{name} must be a list of structs")
    return value


class Handler:
    """What the server calls for each method, with the decoded arguments."""

    def __init__(self, service: JobService, *, coalesce: bool | None = None) -> None:
        """``coalesce`` (default: the service's ``server_coalesce`` setting):
        enqueues, dequeues and ACKs go through a ``Coalescer``, which merges
        concurrent calls of a queue into one shard call."""
        # Typed as the client protocol: the wire methods call nothing else of it.
        self.service: PinLaterClient = service
        if coalesce is None:
            coalesce = service.settings.server_coalesce
        self.jobs: JobService | Coalescer = Coalescer(service) if coalesce else service

    @staticmethod
    def _source(context: Any) -> str:
        context = _request(context, "RequestContext")
        source = convert.text(context.source)
        if not source:
            raise InvalidRequest("RequestContext.source is required: it goes into every claim")
        return check_source(source)

    def createQueue(self, context: Any, name: Any) -> None:  # noqa: N802
        self.service.create_queue(validate_queue_name(convert.text(name)))

    def deleteQueue(self, context: Any, name: Any, password: Any) -> None:  # noqa: N802
        self.service.delete_queue(validate_queue_name(convert.text(name)), convert.text(password))

    def enqueueJobs(self, context: Any, request: Any) -> Any:  # noqa: N802
        request = _request(request, "PinLaterEnqueueRequest")
        context = _request(context, "RequestContext")
        wire_jobs = _list(request.jobs, "jobs")
        for job in wire_jobs:
            if job.body is None:
                raise InvalidRequest("every PinLaterJob needs a body")
        jobs = [convert.job_from_wire(j) for j in wire_jobs]
        if not tracing.ON:
            # Not traced here: the jobs keep the caller's trace all the same.
            carrier = convert.trace_carrier(context)
            if carrier is not None:
                jobs = [j if j.trace else replace(j, trace=carrier["traceparent"]) for j in jobs]
        key = convert.text(context.requestId) or None
        batch = convert.text(getattr(request, "batch", None)) or None
        descriptors = self.jobs.enqueue(convert.text(request.queueName), jobs, idempotency_key=key,  # type: ignore[arg-type]
                                        batch=batch)
        return idl.PinLaterUniqueEnqueueResponse(
            jobDescriptors=descriptors, duplicates=list(descriptors.duplicates) or None)

    def dequeueJobs(self, context: Any, request: Any) -> Any:  # noqa: N802
        source = self._source(context)
        request = _request(request, "PinLaterDequeueRequest")
        queue = convert.text(request.queueName)
        succeeded, failed = [], []
        ack = request.jobAckRequest
        if ack is not None:
            ack_queue = convert.text(ack.queueName)
            succeeded = convert.acks_from_wire(_list(ack.jobsSucceeded, "jobsSucceeded"))
            failed = convert.acks_from_wire(_list(ack.jobsFailed, "jobsFailed"))
            if ack_queue != queue and (succeeded or failed):
                self.jobs.ack(ack_queue, succeeded=succeeded, failed=failed, source=source)  # type: ignore[arg-type]
                succeeded, failed = [], []
        jobs = self.jobs.dequeue(
            queue,  # type: ignore[arg-type]
            _int(request.limit, "limit", 0),  # type: ignore[arg-type]
            source=source,
            dry_run=bool(request.dryRun),
            coverage=1.0 if request.coverage is None else float(request.coverage),
            succeeded=succeeded,
            failed=failed,
        )
        return convert.dequeued_to_wire(jobs)

    def ackDequeuedJobs(self, context: Any, request: Any) -> None:  # noqa: N802
        source = self._source(context)
        request = _request(request, "PinLaterJobAckRequest")
        queue = convert.text(request.queueName)
        result = self.jobs.ack(
            queue,  # type: ignore[arg-type]
            succeeded=convert.acks_from_wire(_list(request.jobsSucceeded, "jobsSucceeded")),
            failed=convert.acks_from_wire(_list(request.jobsFailed, "jobsFailed")),
            source=source,
        )
        if result.stale:
            log.info("ignored %d stale ACKs on %s from %s", len(result.stale), queue, source)

    def checkpointJobs(self, context: Any, request: Any) -> None:  # noqa: N802
        source = self._source(context)
        request = _request(request, "PinLaterCheckpointJobsRequest")
        checkpoints = [convert.checkpoint_from_wire(r) for r in _list(request.requests, "requests")]
        self.service.checkpoint(convert.text(request.queueName), checkpoints, source=source)  # type: ignore[arg-type]

    def lookupJobs(self, context: Any, request: Any) -> dict[str, Any]:  # noqa: N802
        request = _request(request, "PinLaterLookupJobRequest")
        descriptors = [convert.text(d) for d in _list(request.jobDescriptors, "jobDescriptors")]
        found = self.service.lookup(descriptors, include_body=bool(request.includeBody))  # type: ignore[arg-type]
        return {d: convert.info_to_wire(info) for d, info in found.items()}

    def getJobCount(self, context: Any, request: Any) -> int:  # noqa: N802
        request = _request(request, "PinLaterGetJobCountRequest")
        return self.service.count(
            convert.text(request.queueName),  # type: ignore[arg-type]
            _state(request.jobState),
            priority=_int(request.priority, "priority") or None,
            future=bool(request.countFutureJobs),
            body_regex=convert.text(request.bodyRegexToMatch) or None,
        )

    def getQueueNames(self, context: Any) -> set[str]:  # noqa: N802
        return self.service.queue_names()

    def scanJobs(self, context: Any, request: Any) -> Any:  # noqa: N802
        request = _request(request, "PinLaterScanJobsRequest")
        result = self.service.scan(
            convert.text(request.queueName),  # type: ignore[arg-type]
            _state(request.jobState),
            priority=_int(request.priority, "priority") or None,
            future=bool(request.scanFutureJobs),
            continuation=convert.text(request.continuation) or "0",
            limit=_int(request.limit, "limit", 100),  # type: ignore[arg-type]
            body_regex=convert.text(request.bodyRegexToMatch) or None,
            include_body=False,
        )
        return idl.PinLaterScanJobsResponse(
            scannedJobs=[convert.info_to_wire(info) for info in result.jobs], continuation=result.continuation
        )

    def retryFailedJobs(self, context: Any, request: Any) -> int:  # noqa: N802
        request = _request(request, "PinLaterRetryFailedJobsRequest")
        return self.service.retry_failed(
            convert.text(request.queueName),  # type: ignore[arg-type]
            priority=_priority_or_1(request.priority),
            attempts=_int(request.attemptsToAllow, "attemptsToAllow", 1),  # type: ignore[arg-type]
            run_after_ms=convert.unset_zero(_int(request.runAfterTimestampMillis, "runAfterTimestampMillis")),
            limit=_int(request.limit, "limit", 1000),  # type: ignore[arg-type]
        )

    def deleteJobs(self, context: Any, request: Any) -> int:  # noqa: N802
        request = _request(request, "PinLaterDeleteJobsRequest")
        return self.service.delete_jobs(
            convert.text(request.queueName),  # type: ignore[arg-type]
            _state(request.jobState),
            priority=_priority_or_1(request.priority),
            body_regex=convert.text(request.bodyRegexToMatch) or None,
            limit=_int(request.limit, "limit", 1000),  # type: ignore[arg-type]
        )

    # -- extensions ----------------------------------------------------------------------
    def createQueueWithConfig(self, context: Any, config: Any) -> Any:  # noqa: N802
        """createQueue with options; idempotent: an existing queue keeps its
        config, which is returned."""
        config = _request(config, "PinLaterQueueConfig")
        name = validate_queue_name(convert.text(config.name))
        if config.paused:
            raise InvalidRequest("a queue cannot be created paused: create it, then pause it with updateQueueConfig")
        if config.keyRate is not None or config.keyMaxRunning is not None or config.uniqueSucceededMillis:
            raise InvalidRequest("a queue is created without per-key limits (keyRate, keyMaxRunning) or a unique "
                                 "period (uniqueSucceededMillis): create it, then set them with updateQueueConfig")
        created = self.service.create_queue(
            name,
            priorities=convert.wire_int(config.priorities, "priorities", 1, MAX_PRIORITIES),
            max_dequeue_rate=convert.wire_rate(config.maxDequeueRate),
            max_running=convert.wire_max_running(config.maxRunning),
            **convert.duration_fields_from_wire(config),
        )
        return convert.queue_config_to_wire(created)

    def getQueueConfig(self, context: Any, name: Any) -> Any:  # noqa: N802
        # Fresh from the control store: clients cache it themselves.
        config = self.service.queue_config(validate_queue_name(convert.text(name)), fresh=True)
        return convert.queue_config_to_wire(config)

    def updateQueueConfig(self, context: Any, update: Any) -> Any:  # noqa: N802
        update = _request(update, "PinLaterQueueConfigUpdate")
        name = validate_queue_name(convert.text(update.name))
        changes: dict[str, object] = convert.duration_fields_from_wire(update)
        unique_ms = convert.wire_int(update.uniqueSucceededMillis, "uniqueSucceededMillis", 0, MAX_DURATION_MS)
        if unique_ms is not None:
            changes["unique_succeeded_ms"] = unique_ms
        rate = convert.wire_rate(update.maxDequeueRate)
        if update.unlimitedRate:
            if rate is not None:
                raise InvalidRequest("give maxDequeueRate or unlimitedRate, not both")
            changes["max_dequeue_rate"] = None
        elif rate is not None:
            changes["max_dequeue_rate"] = rate
        cap = convert.wire_max_running(update.maxRunning)
        if update.unlimitedRunning:
            if cap is not None:
                raise InvalidRequest("give maxRunning or unlimitedRunning, not both")
            changes["max_running"] = None
        elif cap is not None:
            changes["max_running"] = cap
        key_cap = convert.wire_max_running(update.keyMaxRunning, "keyMaxRunning")
        if update.unlimitedKeyRunning:
            if key_cap is not None:
                raise InvalidRequest("give keyMaxRunning or unlimitedKeyRunning, not both")
            changes["key_max_running"] = None
        elif key_cap is not None:
            changes["key_max_running"] = key_cap
        key_rate = convert.wire_key_rate(update.keyRate)
        if update.unlimitedKeyRate:
            if key_rate is not None:
                raise InvalidRequest("give keyRate or unlimitedKeyRate, not both")
            changes["key_rate"] = None
        elif key_rate is not None:
            changes["key_rate"] = key_rate
        if update.paused is not None:
            changes["paused"] = bool(update.paused)
        if not changes:
            raise InvalidRequest("the update changes nothing: set at least one field besides name")
        return convert.queue_config_to_wire(self.service.update_queue(name, **changes))

    def ackDequeuedJobsWithResult(self, context: Any, request: Any) -> Any:  # noqa: N802
        """ackDequeuedJobs, answered per descriptor. A shard that could not
        be reached is reported in notApplied, not raised: the caller sees
        what was applied and retries only the rest."""
        source = self._source(context)
        request = _request(request, "PinLaterJobAckRequest")
        try:
            result = self.jobs.ack(
                convert.text(request.queueName),  # type: ignore[arg-type]
                succeeded=convert.acks_from_wire(_list(request.jobsSucceeded, "jobsSucceeded")),
                failed=convert.acks_from_wire(_list(request.jobsFailed, "jobsFailed")),
                source=source,
            )
        except AckNotApplied as exc:
            result = exc.result
        return convert.ack_result_to_wire(result)

    def cancelJobs(self, context: Any, request: Any) -> Any:  # noqa: N802
        request = _request(request, "PinLaterCancelJobsRequest")
        descriptors = [convert.text(d) for d in _list(request.jobDescriptors, "jobDescriptors")]
        result = self.service.cancel(convert.text(request.queueName), descriptors)  # type: ignore[arg-type]
        return convert.cancel_result_to_wire(result)

    def createBatch(self, context: Any, request: Any) -> Any:  # noqa: N802
        request = _request(request, "PinLaterCreateBatchRequest")
        if request.callback is None or request.callback.body is None:
            raise InvalidRequest("a batch needs a callback job with a body")
        return self.service.create_batch(
            convert.text(request.queueName), convert.job_from_wire(request.callback),  # type: ignore[arg-type]
            description=convert.text(request.description) or "", batch=convert.text(request.batch) or None)

    def sealBatch(self, context: Any, batch: Any) -> Any:  # noqa: N802
        return convert.batch_status_to_wire(self.service.seal_batch(convert.text(batch)))  # type: ignore[arg-type]

    def getBatch(self, context: Any, batch: Any) -> Any:  # noqa: N802
        return convert.batch_status_to_wire(self.service.batch_status(convert.text(batch)))  # type: ignore[arg-type]

    def cancelBatch(self, context: Any, batch: Any) -> Any:  # noqa: N802
        return convert.cancel_result_to_wire(self.service.cancel_batch(convert.text(batch)))  # type: ignore[arg-type]

    def checkpointJobsWithResult(self, context: Any, request: Any) -> Any:  # noqa: N802
        """checkpointJobs, answered per descriptor as ackDequeuedJobsWithResult."""
        source = self._source(context)
        request = _request(request, "PinLaterCheckpointJobsRequest")
        checkpoints = [convert.checkpoint_from_wire(r) for r in _list(request.requests, "requests")]
        result: AckResult
        try:
            result = self.service.checkpoint(convert.text(request.queueName), checkpoints, source=source)  # type: ignore[arg-type]
        except AckNotApplied as exc:
            result = exc.result
        return convert.ack_result_to_wire(result)
