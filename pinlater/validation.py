"""Input checks shared by every entry point (in-process, Thrift, CLI)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

import re2

from pinlater.errors import EnqueueRejected, InvalidRequest, PinLaterError, PriorityNotSupported
from pinlater.limits import MAX_DELAY_MS, MAX_KEY_BYTES, MAX_TIMESTAMP_MS, MAX_UNIQUE_KEY_BYTES
from pinlater.models import Job
from pinlater.queue_config import QueueConfig

MAX_ATTEMPTS = 1000
MAX_LIMIT = 10_000
MAX_SOURCE_LEN = 200
MAX_STATUS_LEN = 4000
MAX_REGEX_LEN = 1000


def check_priority(config: QueueConfig, priority: int) -> int:
    if not _is_int(priority) or not 1 <= priority <= config.priorities:
        raise PriorityNotSupported(
            f"priority {priority!r} is not supported by queue {config.name!r}: "
            f"use 1 (highest) to {config.priorities}"
        )
    return priority


def check_limit(limit: int, what: str = "limit") -> int:
    if not _is_int(limit) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"{what} must be between 1 and {MAX_LIMIT}, got {limit!r}")
    return limit


def check_attempts(attempts: int) -> int:
    if not _is_int(attempts) or not 1 <= attempts <= MAX_ATTEMPTS:
        raise EnqueueRejected(f"attempts allowed must be between 1 and {MAX_ATTEMPTS}, got {attempts!r}")
    return attempts


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_timestamp(
    value: int | None, what: str = "run_after", error: type[PinLaterError] = InvalidRequest
) -> int | None:
    """A time in ms since the epoch: 0 to MAX_TIMESTAMP_MS (2**53 - 1), the
    range every backend stores exactly. None (now) passes."""
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise error(
            f"{what} must be milliseconds since the epoch from 0 to {MAX_TIMESTAMP_MS} (2**53 - 1), got {value!r}"
        )
    return value


def check_delay(value: int, what: str = "retry delay") -> int:
    """A delay in ms: 0 to MAX_DELAY_MS (100 years)."""
    if not _is_int(value) or not 0 <= value <= MAX_DELAY_MS:
        raise InvalidRequest(f"{what} must be 0 to {MAX_DELAY_MS} ms (100 years), got {value!r}")
    return value


def check_batch(
    count: int,
    max_per_call: int,
    what: str = "jobs",
    error: type[PinLaterError] = InvalidRequest,
    setting: str | None = "PINLATER_MAX_JOBS_PER_CALL",
) -> None:
    """One call is one script or transaction on a shard: bounded.
    ``setting``: the variable that sets the limit (None: a fixed limit)."""
    if count > max_per_call:
        where = f" ({setting})" if setting else ""
        raise error(f"{count} {what} in one call; the limit is {max_per_call}{where}: split the batch")


def check_source(source: str) -> str:
    if not isinstance(source, str) or not source or len(source) > MAX_SOURCE_LEN:
        raise InvalidRequest(f"request source must be 1 to {MAX_SOURCE_LEN} characters")
    return source


# A claim as dequeues make it (pinlater.stores.base): a 16-hex token, then
# the claimer's source.
_CLAIM = re.compile(rf"[0-9a-f]{{16}}@.{{1,{MAX_SOURCE_LEN}}}", re.DOTALL)


def check_claim(claim: str | None) -> str | None:
    """An ACK's or checkpoint's claim: None, or ``TOKEN@SOURCE`` as a
    dequeue gave it; "" (a job from a server that sends no claims) is None.
    The message never repeats the value: a claim proves its holder."""
    if claim is None or claim == "":
        return None
    if not isinstance(claim, str) or not _CLAIM.fullmatch(claim):
        size = f"{len(claim)} characters" if isinstance(claim, str | bytes) else f"a {type(claim).__name__}"
        raise InvalidRequest(
            f"claim must be a dequeued job's claim, TOKEN@SOURCE (16 lowercase hex digits, '@', "
            f"the source of 1 to {MAX_SOURCE_LEN} characters), got {size}"
        )
    return claim


def check_claims(claims: Iterable[str | None]) -> None:
    """``check_claim`` of each distinct claim: the jobs of one dequeue call
    share its claim, so a batch of ACKs usually names one or few (a set
    of them costs far less than a check per entry)."""
    claims = list(claims)
    try:
        distinct: Iterable[str | None] = set(claims)
    except TypeError:  # something unhashable, refused below
        distinct = claims
    for claim in distinct:
        check_claim(claim)


def check_job(config: QueueConfig, job: Job, max_body_bytes: int) -> None:
    if not isinstance(job.body, bytes | bytearray | memoryview):
        raise EnqueueRejected(f"job body must be bytes, got {type(job.body).__name__}")
    if not job.body:
        raise EnqueueRejected("job body is empty")
    if len(job.body) > max_body_bytes:
        raise EnqueueRejected(
            f"job body is {len(job.body)} bytes; the limit is {max_body_bytes}"
        )
    check_priority(config, job.priority)
    if job.attempts_allowed is not None:
        check_attempts(job.attempts_allowed)
    check_timestamp(job.run_after_ms, "run_after", EnqueueRejected)
    check_status(job.custom_status, EnqueueRejected)
    if job.trace is not None:
        check_trace(job.trace, EnqueueRejected)
    if job.key != "":
        check_key(job.key, EnqueueRejected)
    if job.unique != "":
        check_unique(job.unique, EnqueueRejected)


def check_key(key: object, error: type[PinLaterError] = InvalidRequest) -> str:
    """A fairness key: text of at most MAX_KEY_BYTES bytes in UTF-8 ("" is no key)."""
    return _check_text(key, "job key", MAX_KEY_BYTES, error)


def check_unique(unique: object, error: type[PinLaterError] = InvalidRequest) -> str:
    """A unique key: text of at most MAX_UNIQUE_KEY_BYTES bytes in UTF-8 ("" is none)."""
    return _check_text(unique, "job unique key", MAX_UNIQUE_KEY_BYTES, error)


def _check_text(value: object, what: str, most: int, error: type[PinLaterError]) -> str:
    if not isinstance(value, str):
        raise error(f"{what} must be text, got a {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise error(f"{what} must be valid Unicode text (it holds a lone surrogate)") from None
    if size > most:
        raise error(f"{what} is {size} bytes in UTF-8; the most is {most}")
    return value


# W3C Trace Context's traceparent, version 00: version, trace id, parent
# span id, flags; lowercase hex, ids not all zero.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def check_trace(trace: object, error: type[PinLaterError] = InvalidRequest) -> str:
    if not isinstance(trace, str) or not _TRACEPARENT.fullmatch(trace):
        shown = repr(trace) if isinstance(trace, str) and len(trace) <= 64 else f"a {type(trace).__name__}"
        raise error(f"job trace must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {shown}")
    return trace


def check_status(status: str, error: type[PinLaterError] = InvalidRequest) -> str:
    if not isinstance(status, str) or len(status) > MAX_STATUS_LEN:
        raise error(f"custom status must be text of at most {MAX_STATUS_LEN} characters")
    return status


class BodyRegex(Protocol):
    """A compiled body regex: RE2, matched against bytes bodies."""

    def search(self, text: bytes) -> object | None: ...


def _re2_options() -> re2.Options:
    options = re2.Options()
    # Bodies are bytes read as UTF-8 (RE2's default encoding): "." is one
    # character, and bytes that are not UTF-8 are matched only by \C.
    options.encoding = re2.Options.Encoding.UTF8
    # A caller's bad pattern is an answer to that caller, not a line on the
    # server's stderr.
    options.log_errors = False
    # Only "does it match" is asked: no submatch work.
    options.never_capture = True
    # Program and DFA cache of one pattern; re2 keeps up to 128 compiled
    # patterns, so this bounds them all to 256 MiB.
    options.max_mem = 2 << 20
    return options


_OPTIONS = _re2_options()


def compile_body_regex(pattern: str | None) -> BodyRegex | None:
    """RE2 syntax (https://github.com/google/re2/wiki/Syntax), linear time in
    the body's length. Python-only syntax (backreferences, lookaround,
    possessive quantifiers, \\Z) is refused: there is no fallback to a
    backtracking engine."""
    if not pattern:
        return None
    if len(pattern) > MAX_REGEX_LEN:
        raise InvalidRequest(f"body regex is {len(pattern)} characters; the limit is {MAX_REGEX_LEN}")
    try:
        regex: BodyRegex = re2.compile(pattern.encode(), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRequest(f"invalid body regex {pattern!r} (RE2 syntax): {reason}") from None
    return regex


_BATCH_ID = re.compile(r"([A-Za-z0-9_]{1,50})\.b[0-9a-f]{24}")


def check_batch_id(batch: object) -> str:
    """A batch's id (``pinlater.models.new_batch_id``): QUEUE.b and 24
    lowercase hex digits."""
    if not isinstance(batch, str) or not _BATCH_ID.fullmatch(batch):
        shown = f"{len(batch)} characters" if isinstance(batch, str) else f"a {type(batch).__name__}"
        raise InvalidRequest(f"batch must be a batch id (its callback's queue, '.b' and 24 lowercase hex digits), "
                             f"got {shown}")
    return batch


def batch_queue(batch: str) -> str:
    """The queue of a batch's callback, which its id names."""
    return batch.split(".", 1)[0]
