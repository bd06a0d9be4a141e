"""Errors, each carrying the wire ErrorCode the Thrift server reports."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinlater.models import AckResult


class ErrorCode(IntEnum):
    CONTINUATION_INVALID = 400
    PASSWORD_INVALID = 403
    QUEUE_NAME_INVALID = 410
    QUEUE_NAME_TOO_LONG = 411
    QUEUE_NOT_FOUND = 413
    PRIORITY_NOT_SUPPORTED = 416
    DEQUEUE_RATE_LIMITED = 429
    ENQUEUE_REJECTED = 430
    UNKNOWN = 500
    NO_HEALTHY_SHARDS = 501
    SHARD_CONNECTION_FAILED = 502


class PinLaterError(Exception):
    """Base of every error the job service reports to its callers."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(PinLaterError):
    """Malformed input that fits no more specific code (bad descriptor, bad limit...)."""

    code = ErrorCode.UNKNOWN


class RegexBudgetExceeded(InvalidRequest):
    """A body-regex count or delete would examine more bodies, or run longer,
    than one call may (PINLATER_REGEX_MAX_BODIES, PINLATER_REGEX_BUDGET_S).
    The message says which bound was hit and how to narrow the request."""


class ReadBudgetExceeded(InvalidRequest):
    """A lookup or scan with bodies would return more body bytes than one
    call may (PINLATER_MAX_READ_BYTES). Refused whole, before the bodies
    past the budget are read; the message says how to narrow the request."""


class ContinuationInvalid(PinLaterError):
    code = ErrorCode.CONTINUATION_INVALID


class PasswordInvalid(PinLaterError):
    code = ErrorCode.PASSWORD_INVALID


class QueueNameInvalid(PinLaterError):
    code = ErrorCode.QUEUE_NAME_INVALID


class QueueNameTooLong(PinLaterError):
    code = ErrorCode.QUEUE_NAME_TOO_LONG


class QueueNotFound(PinLaterError):
    code = ErrorCode.QUEUE_NOT_FOUND


class QueueDeleted(QueueNotFound):
    """A shard refused to store jobs of a queue deleted there and not
    created again since: the caller's config of the queue is stale, or
    the shard was down when the queue was created again."""

    def __init__(self, queue: str, shard_id: str) -> None:
        super().__init__(f"queue {queue!r} was deleted (shard {shard_id})")
        self.queue = queue


class PriorityNotSupported(PinLaterError):
    code = ErrorCode.PRIORITY_NOT_SUPPORTED


class DequeueRateLimited(PinLaterError):
    code = ErrorCode.DEQUEUE_RATE_LIMITED

    def __init__(self, message: str, retry_after_ms: int = 100) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class EnqueueRejected(PinLaterError):
    """The job itself is unacceptable (body too large, bad attempts...)."""

    code = ErrorCode.ENQUEUE_REJECTED


class NoHealthyShards(PinLaterError):
    code = ErrorCode.NO_HEALTHY_SHARDS


class ShardConnectionFailed(PinLaterError):
    code = ErrorCode.SHARD_CONNECTION_FAILED


class EnqueueOutcomeUnknown(ShardConnectionFailed):
    """A shard went silent after an enqueue was sent to it: its jobs may or
    may not be stored. Not sent to another shard, which could store them
    twice; a retry with the same idempotency key is refused while the first
    try's reservation holds (a minute), so it cannot either."""


class AckNotApplied(ShardConnectionFailed):
    """Part of an ACK or checkpoint call could not be applied because a
    shard was unreachable. ``result`` says per descriptor what was applied,
    what was stale and what was not applied, so the caller retries only
    ``result.unapplied``."""

    def __init__(self, message: str, result: AckResult) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> tuple[type[AckNotApplied], tuple[str, AckResult]]:
        # Pickled with its result (a worker process's error reaches its pool).
        return type(self), (str(self), self.result)


class StorageError(PinLaterError):
    """A shard answered but the operation failed there (never swallowed)."""

    code = ErrorCode.UNKNOWN


class ConfigUnreadable(StorageError):
    """The queue exists but its stored config cannot be read (damaged by hand
    or by a bug); no change can be made to it until it is repaired."""


_BY_CODE: dict[ErrorCode, type[PinLaterError]] = {
    ErrorCode.CONTINUATION_INVALID: ContinuationInvalid,
    ErrorCode.PASSWORD_INVALID: PasswordInvalid,
    ErrorCode.QUEUE_NAME_INVALID: QueueNameInvalid,
    ErrorCode.QUEUE_NAME_TOO_LONG: QueueNameTooLong,
    ErrorCode.QUEUE_NOT_FOUND: QueueNotFound,
    ErrorCode.PRIORITY_NOT_SUPPORTED: PriorityNotSupported,
    ErrorCode.DEQUEUE_RATE_LIMITED: DequeueRateLimited,
    ErrorCode.ENQUEUE_REJECTED: EnqueueRejected,
    ErrorCode.UNKNOWN: PinLaterError,
    ErrorCode.NO_HEALTHY_SHARDS: NoHealthyShards,
    ErrorCode.SHARD_CONNECTION_FAILED: ShardConnectionFailed,
}


# Errors a code alone does not tell apart, named on the wire as well
# (``PinLaterKindedException.kind``, an extension): each made from its message.
# EnqueueOutcomeUnknown above all: its jobs may be stored, so a caller
# must not take it for a plain failure and send them again.
_BY_KIND: dict[str, type[PinLaterError]] = {
    cls.__name__: cls
    for cls in (EnqueueOutcomeUnknown, InvalidRequest, RegexBudgetExceeded, ReadBudgetExceeded, StorageError,
                ConfigUnreadable)
}


def wire_kind(exc: PinLaterError) -> str | None:
    """The name that tells ``exc`` apart from other errors of its code, if any."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _BY_KIND and _BY_KIND[cls.__name__] is cls:
            return cls.__name__
    return None


def error_for_code(code: int, message: str, kind: str | None = None) -> PinLaterError:
    """Rebuild the typed error from a wire code and kind (used by remote clients)."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except ValueError:
        cls = PinLaterError
    named = _BY_KIND.get(kind or "")
    if named is not None and named.code == cls.code:
        cls = named
    return cls(message)
