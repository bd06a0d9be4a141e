"""Conversions between the wire structs and the service's model types, both
ways (the server decodes requests and encodes results, the client the
opposite), and between errors and PinLaterException."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pinlater.errors import DequeueRateLimited, ErrorCode, InvalidRequest, PinLaterError, error_for_code, wire_kind
from pinlater.limits import MAX_DELAY_MS, MAX_DURATION_MS, MAX_RUNNING_CAP
from pinlater.models import Ack, AckResult, BatchStatus, CancelResult, Checkpoint, DequeuedJob, Job, JobInfo
from pinlater.queue_config import QueueConfig, check_key_rate, check_rate
from pinlater.retry import DEFAULT_RETRY_POLICY, MAX_RETRIES, RetryPolicy
from pinlater.states import JobState
from pinlater.thrift import idl
from pinlater.validation import check_trace

_RETRY_AFTER = re.compile(r"\(retry after (\d+) ms\)$")


def text(value: object) -> str | None:
    """A wire ``string`` field: thriftpy2 hands over bytes when the peer's
    bytes are not UTF-8; those are passed on as-is to fail validation."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value  # type: ignore[return-value]
    return None


def blob(value: object) -> bytes | None:
    """A body on the wire (``binary``, or ``string`` for checkpoints' newBody)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return None


def unset_zero(value: int | None) -> int | None:
    """runAfter, attempts...: unset and 0 both mean "not given"."""
    return value if value else None


# -- errors --------------------------------------------------------------------------
def to_wire_error(exc: PinLaterError) -> Any:
    message = exc.message
    if isinstance(exc, DequeueRateLimited):
        message = f"{message} (retry after {exc.retry_after_ms} ms)"
    return idl.PinLaterKindedException(errorCode=int(exc.code), message=message, kind=wire_kind(exc))


def from_wire_error(exc: Any) -> PinLaterError:
    code = exc.errorCode if isinstance(exc.errorCode, int) else ErrorCode.UNKNOWN
    message = str(exc.message or "")
    kind = getattr(exc, "kind", None)
    error = error_for_code(code, message, kind if isinstance(kind, str) else None)
    if isinstance(error, DequeueRateLimited):
        match = _RETRY_AFTER.search(message)
        if match:
            error.retry_after_ms = int(match.group(1))
    return error


def trace_carrier(context: Any) -> dict[str, str] | None:
    """The caller's trace context from a request context (None: it sent
    none, or one that is not a W3C traceparent, which is ignored as the
    W3C recommendation says)."""
    traceparent = getattr(context, "traceparent", None)
    if traceparent is None:
        return None
    try:
        carrier = {"traceparent": check_trace(text(traceparent))}
    except InvalidRequest:
        return None
    tracestate = text(getattr(context, "tracestate", None))
    if isinstance(tracestate, str) and tracestate:
        carrier["tracestate"] = tracestate
    return carrier


# -- jobs ------------------------------------------------------------------------------
def job_to_wire(job: Job) -> Any:
    return idl.PinLaterTracedJob(
        body=bytes(job.body),
        priority=job.priority,
        runAfterTimestampMillis=job.run_after_ms,
        numAttemptsAllowed=job.attempts_allowed or 0,
        customStatus=job.custom_status,
        traceparent=job.trace,
        key=job.key or None,
        unique=job.unique or None,
    )


def job_from_wire(wire: Any) -> Job:
    # Runs once per job of every batch: kept to plain attribute reads.
    body, status, attempts = wire.body, wire.customStatus, wire.numAttemptsAllowed
    return Job(
        body if type(body) is bytes else blob(body),  # type: ignore[arg-type]  # None is refused later
        1 if wire.priority is None else wire.priority,
        wire.runAfterTimestampMillis or None,  # unset or 0: now
        2 if attempts is None else (attempts or None),  # 0: the queue's retry policy
        status if type(status) is str else (text(status) or ""),
        # Checked with the rest of the job (pinlater.validation.check_job).
        getattr(wire, "traceparent", None),
        _wire_key(getattr(wire, "key", None)),
        _wire_key(getattr(wire, "unique", None)),
    )


def _wire_key(key: object) -> Any:
    """A job's fairness or unique key from the wire: unset is "", text as sent, anything else
    (bytes that are not UTF-8) kept for check_job to refuse in one line."""
    if key is None:
        return ""
    return text(key) if isinstance(key, bytes) else key


def acks_to_wire(acks: Iterable[Ack]) -> list[Any]:
    return [
        idl.PinLaterClaimedJobAckInfo(
            jobDescriptor=a.descriptor, appendCustomStatus=a.append_custom_status, retryDelayMillis=a.retry_delay_ms,
            claim=a.claim or None,
        )
        for a in acks
    ]


def acks_from_wire(infos: Sequence[Any] | None) -> list[Ack]:
    # The claim is checked with the rest of the ACK (pinlater.engine.settle.prepare_acks).
    return [
        Ack(
            descriptor=text(i.jobDescriptor),  # type: ignore[arg-type]
            append_custom_status=text(i.appendCustomStatus) or "",
            retry_delay_ms=i.retryDelayMillis or 0,
            claim=text(getattr(i, "claim", None)),
        )
        for i in infos or ()
    ]


def checkpoint_to_wire(c: Checkpoint) -> Any:
    return idl.PinLaterClaimedCheckpointJobRequest(
        jobDescriptor=c.descriptor,
        newBody=c.new_body,
        moveToPending=c.move_to_pending,
        runAfterTimestampMillis=c.run_after_ms,
        numOfAttemptsAllowed=c.attempts_allowed,
        prependCustomStatus=c.prepend_custom_status,
        claim=c.claim or None,
    )


def checkpoint_from_wire(r: Any) -> Checkpoint:
    return Checkpoint(
        descriptor=text(r.jobDescriptor),  # type: ignore[arg-type]
        new_body=blob(r.newBody),
        move_to_pending=bool(r.moveToPending),
        run_after_ms=unset_zero(r.runAfterTimestampMillis),
        attempts_allowed=unset_zero(r.numOfAttemptsAllowed),
        prepend_custom_status=text(r.prependCustomStatus),
        claim=text(getattr(r, "claim", None)),  # checked with the rest (JobService.checkpoint)
    )


def dequeued_to_wire(jobs: Sequence[DequeuedJob]) -> Any:
    return idl.PinLaterDequeueResponse(
        jobs={j.descriptor: j.body for j in jobs},
        jobMetadata={
            j.descriptor: idl.PinLaterTracedDequeueMetadata(
                attemptsAllowed=j.attempts_allowed, attemptsRemaining=j.attempts_remaining,
                traceparent=j.trace, runAfterTimestampMillis=j.run_after_ms, claim=j.claim or None,
            )
            for j in jobs
        },
    )


def dequeued_from_wire(response: Any) -> list[DequeuedJob]:
    metadata = response.jobMetadata or {}
    out = []
    for descriptor, body in (response.jobs or {}).items():
        meta = metadata.get(descriptor)
        out.append(
            DequeuedJob(
                descriptor=descriptor,
                body=blob(body) or b"",
                attempts_allowed=(meta.attemptsAllowed or 0) if meta else 0,
                attempts_remaining=(meta.attemptsRemaining or 0) if meta else 0,
                claim=text(getattr(meta, "claim", None)) or "",  # "": a server that sends none
                trace=text(getattr(meta, "traceparent", None)) or None,
                run_after_ms=getattr(meta, "runAfterTimestampMillis", None),
            )
        )
    return out


def info_to_wire(info: JobInfo) -> Any:
    return idl.PinLaterKeyedJobInfo(
        jobDescriptor=info.descriptor,
        jobState=int(info.state),
        attemptsAllowed=info.attempts_allowed,
        attemptsRemaining=info.attempts_remaining,
        customStatus=info.custom_status,
        createdAtTimestampMillis=info.created_at_ms,
        runAfterTimestampMillis=info.run_after_ms,
        updatedAtTimestampMillis=info.updated_at_ms,
        claimDescriptor=info.claim,
        body=info.body,
        key=info.key or None,
    )


def info_from_wire(w: Any) -> JobInfo:
    return JobInfo(
        descriptor=w.jobDescriptor,
        state=JobState(w.jobState),
        attempts_allowed=w.attemptsAllowed,
        attempts_remaining=w.attemptsRemaining,
        custom_status=w.customStatus or "",
        created_at_ms=w.createdAtTimestampMillis,
        run_after_ms=w.runAfterTimestampMillis or 0,
        updated_at_ms=w.updatedAtTimestampMillis or 0,
        claim=w.claimDescriptor or None,
        body=blob(w.body),
        key=text(getattr(w, "key", None)) or "",
    )


# -- extensions: queue configs and ACK results ------------------------------------------
def retry_to_wire(policy: RetryPolicy) -> Any:
    return idl.PinLaterRetryPolicy(
        kind=policy.kind,
        retries=policy.retries,
        baseMillis=policy.base_ms,
        linearRetries=policy.linear_retries,
        factor=policy.factor,
        maxDelayMillis=policy.max_delay_ms,
        delaysMillis=list(policy.delays_ms),
    )


def wire_int(value: Any, name: str, low: int, high: int) -> int | None:
    """An optional integer field of a request: None if unset, else checked."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be an integer between {low} and {high}, got {value!r}")
    return value


def wire_rate(value: Any) -> float | None:
    """A rate limit from the wire, checked as everywhere (QueueConfig's rule)."""
    try:
        return check_rate(value)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def retry_from_wire(wire: Any) -> RetryPolicy:
    """Unset fields take the default policy's values; refuses bad ones."""
    base = DEFAULT_RETRY_POLICY
    kind = text(wire.kind)
    delays = wire.delaysMillis
    if delays is not None and not isinstance(delays, list):
        raise InvalidRequest("delaysMillis must be a list of integers")
    factor = wire.factor
    if factor is not None and (
        not isinstance(factor, (int, float)) or isinstance(factor, bool) or not math.isfinite(factor)
    ):
        raise InvalidRequest(f"factor must be a finite number, got {factor!r}")
    fields: dict[str, Any] = {
        "kind": base.kind if kind is None else kind,
        "retries": wire_int(wire.retries, "retries", 0, MAX_RETRIES),
        "base_ms": wire_int(wire.baseMillis, "baseMillis", 0, MAX_DELAY_MS),
        "linear_retries": wire_int(wire.linearRetries, "linearRetries", 0, MAX_RETRIES),
        "factor": None if factor is None else float(factor),
        "max_delay_ms": wire_int(wire.maxDelayMillis, "maxDelayMillis", 0, MAX_DELAY_MS),
        "delays_ms": None if delays is None else tuple(
            wire_int(d, "delaysMillis[]", 0, MAX_DELAY_MS) for d in delays
        ),
    }
    if fields["kind"] == "custom" and fields["retries"] is None and fields["delays_ms"]:
        fields["retries"] = len(fields["delays_ms"])  # as RetryPolicy.custom
    try:
        return RetryPolicy(**{k: v for k, v in fields.items() if v is not None})
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"invalid retryPolicy: {exc}") from None


def queue_config_to_wire(config: QueueConfig) -> Any:
    return idl.PinLaterQueueConfig(
        name=config.name,
        priorities=config.priorities,
        maxDequeueRate=config.max_dequeue_rate,
        paused=config.paused,
        claimTimeoutMillis=config.claim_timeout_ms,
        retryPolicy=retry_to_wire(config.retry),
        succeededRetentionMillis=config.succeeded_retention_ms,
        failedRetentionMillis=config.failed_retention_ms,
        maxRunning=config.max_running,
        keyRate=config.key_rate,
        keyMaxRunning=config.key_max_running,
        uniqueSucceededMillis=config.unique_succeeded_ms,
    )


# The config fields whose unset value on the wire means "no limit".
_UNSET_IS_UNLIMITED = ("max_dequeue_rate", "max_running", "key_rate", "key_max_running")


def queue_config_from_wire(wire: Any) -> QueueConfig:
    """A config as a server sends it (every field set; defaults if not)."""
    fields: dict[str, Any] = {
        "priorities": wire.priorities,
        "max_dequeue_rate": wire.maxDequeueRate,
        "paused": bool(wire.paused),
        "claim_timeout_ms": wire.claimTimeoutMillis,
        "retry": None if wire.retryPolicy is None else retry_from_wire(wire.retryPolicy),
        "succeeded_retention_ms": wire.succeededRetentionMillis,
        "failed_retention_ms": wire.failedRetentionMillis,
        "max_running": wire.maxRunning,
        "key_rate": wire.keyRate,
        "key_max_running": wire.keyMaxRunning,
        "unique_succeeded_ms": wire.uniqueSucceededMillis,
    }
    return QueueConfig(
        name=text(wire.name) or "",
        **{k: v for k, v in fields.items() if v is not None or k in _UNSET_IS_UNLIMITED},
    )


def wire_key_rate(value: Any) -> float | None:
    """A per-key rate from the wire: unset, or as ``check_key_rate``."""
    if value is None:
        return None
    try:
        return check_key_rate(value)
    except ValueError as exc:
        raise InvalidRequest(f"keyRate: {exc}") from None


def wire_max_running(value: Any, name: str = "maxRunning") -> int | None:
    """A concurrency cap from the wire: unset, or 1..MAX_RUNNING_CAP."""
    return wire_int(value, name, 1, MAX_RUNNING_CAP)


def duration_fields_from_wire(wire: Any) -> dict[str, Any]:
    """The options a create or update request sets, as QueueConfig fields
    (rate, pause and priorities are the caller's to read)."""
    fields: dict[str, Any] = {
        "claim_timeout_ms": wire_int(wire.claimTimeoutMillis, "claimTimeoutMillis", 0, MAX_DURATION_MS),
        "succeeded_retention_ms": wire_int(
            wire.succeededRetentionMillis, "succeededRetentionMillis", 0, MAX_DURATION_MS
        ),
        "failed_retention_ms": wire_int(wire.failedRetentionMillis, "failedRetentionMillis", 0, MAX_DURATION_MS),
        "retry": None if wire.retryPolicy is None else retry_from_wire(wire.retryPolicy),
    }
    return {k: v for k, v in fields.items() if v is not None}


def ack_result_to_wire(result: AckResult) -> Any:
    return idl.PinLaterAckResult(acked=list(result.acked), stale=list(result.stale), notApplied=dict(result.unapplied),
                                 cancelled=list(result.cancelled))


def batch_status_to_wire(status: BatchStatus) -> Any:
    return idl.PinLaterBatchStatus(
        batch=status.batch, state=status.state, total=status.total, succeeded=status.succeeded,
        failed=status.failed, callback=status.callback, description=status.description,
        createdAtTimestampMillis=status.created_at_ms, updatedAtTimestampMillis=status.updated_at_ms,
    )


def batch_status_from_wire(wire: Any) -> BatchStatus:
    return BatchStatus(text(wire.batch) or "", text(wire.state) or "", int(wire.total or 0),
                       int(wire.succeeded or 0), int(wire.failed or 0), text(wire.callback) or "",
                       text(wire.description) or "", int(wire.createdAtTimestampMillis or 0),
                       int(wire.updatedAtTimestampMillis or 0))


def cancel_result_to_wire(result: CancelResult) -> Any:
    return idl.PinLaterCancelResult(
        cancelled=list(result.cancelled), interrupted=list(result.interrupted), finished=list(result.finished),
        unknown=list(result.unknown), notApplied=dict(result.unapplied),
    )


def cancel_result_from_wire(wire: Any) -> CancelResult:
    return CancelResult(
        cancelled=list(wire.cancelled or ()), interrupted=list(wire.interrupted or ()),
        finished=list(wire.finished or ()), unknown=list(wire.unknown or ()), unapplied=dict(wire.notApplied or {}),
    )


def ack_result_from_wire(wire: Any) -> AckResult:
    return AckResult(
        acked=list(wire.acked or ()), stale=list(wire.stale or ()), unapplied=dict(wire.notApplied or {}),
        cancelled=list(wire.cancelled or ()),
    )
