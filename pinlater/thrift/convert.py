"""Conversions between the wire structs and the service's model types, both
ways (the server decodes requests and encodes results, the client the
opposite), and between errors and PinLaterException."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pinlater.errors import DequeueRateLimited, ErrorCode, PinLaterError, error_for_code
from pinlater.models import Ack, Checkpoint, DequeuedJob, Job, JobInfo
from pinlater.states import JobState
from pinlater.thrift import idl

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
    return idl.PinLaterException(errorCode=int(exc.code), message=message)


def from_wire_error(exc: Any) -> PinLaterError:
    code = exc.errorCode if isinstance(exc.errorCode, int) else ErrorCode.UNKNOWN
    message = str(exc.message or "")
    error = error_for_code(code, message)
    if isinstance(error, DequeueRateLimited):
        match = _RETRY_AFTER.search(message)
        if match:
            error.retry_after_ms = int(match.group(1))
    return error


# -- jobs ------------------------------------------------------------------------------
def job_to_wire(job: Job) -> Any:
    return idl.PinLaterJob(
        body=bytes(job.body),
        priority=job.priority,
        runAfterTimestampMillis=job.run_after_ms,
        numAttemptsAllowed=job.attempts_allowed or 0,
        customStatus=job.custom_status,
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
    )


def acks_to_wire(acks: Iterable[Ack]) -> list[Any]:
    return [
        idl.PinLaterJobAckInfo(
            jobDescriptor=a.descriptor, appendCustomStatus=a.append_custom_status, retryDelayMillis=a.retry_delay_ms
        )
        for a in acks
    ]


def acks_from_wire(infos: Sequence[Any] | None) -> list[Ack]:
    return [
        Ack(
            descriptor=text(i.jobDescriptor),  # type: ignore[arg-type]
            append_custom_status=text(i.appendCustomStatus) or "",
            retry_delay_ms=i.retryDelayMillis or 0,
        )
        for i in infos or ()
    ]


def checkpoint_to_wire(c: Checkpoint) -> Any:
    return idl.PinLaterCheckpointJobRequest(
        jobDescriptor=c.descriptor,
        newBody=c.new_body,
        moveToPending=c.move_to_pending,
        runAfterTimestampMillis=c.run_after_ms,
        numOfAttemptsAllowed=c.attempts_allowed,
        prependCustomStatus=c.prepend_custom_status,
    )


def checkpoint_from_wire(r: Any) -> Checkpoint:
    return Checkpoint(
        descriptor=text(r.jobDescriptor),  # type: ignore[arg-type]
        new_body=blob(r.newBody),
        move_to_pending=bool(r.moveToPending),
        run_after_ms=unset_zero(r.runAfterTimestampMillis),
        attempts_allowed=unset_zero(r.numOfAttemptsAllowed),
        prepend_custom_status=text(r.prependCustomStatus),
    )


def dequeued_to_wire(jobs: Sequence[DequeuedJob]) -> Any:
    return idl.PinLaterDequeueResponse(
        jobs={j.descriptor: j.body for j in jobs},
        jobMetadata={
            j.descriptor: idl.PinLaterDequeueMetadata(
                attemptsAllowed=j.attempts_allowed, attemptsRemaining=j.attempts_remaining
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
                claim="",  # the wire does not carry claims
            )
        )
    return out


def info_to_wire(info: JobInfo) -> Any:
    return idl.PinLaterJobInfo(
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
    )
