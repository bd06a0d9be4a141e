"""Input checks shared by every entry point (in-process, Thrift, CLI)."""

from __future__ import annotations

from typing import Protocol

import re2

from pinlater.errors import EnqueueRejected, InvalidRequest, PriorityNotSupported
from pinlater.models import Job
from pinlater.queue_config import QueueConfig

MAX_ATTEMPTS = 1000
MAX_LIMIT = 10_000
MAX_SOURCE_LEN = 200
MAX_STATUS_LEN = 4000


def check_priority(config: QueueConfig, priority: int) -> int:
    if not isinstance(priority, int) or not 1 <= priority <= config.priorities:
        raise PriorityNotSupported(
            f"priority {priority!r} is not supported by queue {config.name!r}: "
            f"use 1 (highest) to {config.priorities}"
        )
    return priority


def check_limit(limit: int, what: str = "limit") -> int:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"{what} must be between 1 and {MAX_LIMIT}, got {limit!r}")
    return limit


def check_attempts(attempts: int) -> int:
    if not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS:
        raise EnqueueRejected(f"attempts allowed must be between 1 and {MAX_ATTEMPTS}, got {attempts!r}")
    return attempts


def check_source(source: str) -> str:
    if not isinstance(source, str) or not source or len(source) > MAX_SOURCE_LEN:
        raise InvalidRequest(f"request source must be 1 to {MAX_SOURCE_LEN} characters")
    return source


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
    if job.run_after_ms is not None and (not isinstance(job.run_after_ms, int) or job.run_after_ms < 0):
        raise EnqueueRejected(f"run_after must be milliseconds since the epoch, got {job.run_after_ms!r}")
    if len(job.custom_status) > MAX_STATUS_LEN:
        raise EnqueueRejected(f"custom status is longer than {MAX_STATUS_LEN} characters")


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
    return options


_OPTIONS = _re2_options()


def compile_body_regex(pattern: str | None) -> BodyRegex | None:
    """RE2 syntax (https://github.com/google/re2/wiki/Syntax), linear time in
    the body's length. Python-only syntax (backreferences, lookaround,
    possessive quantifiers, \\Z) is refused: there is no fallback to a
    backtracking engine."""
    if not pattern:
        return None
    try:
        regex: BodyRegex = re2.compile(pattern.encode(), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRequest(f"invalid body regex {pattern!r} (RE2 syntax): {reason}") from None
    return regex
