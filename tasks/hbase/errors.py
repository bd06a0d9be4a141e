"""Errors of the HBase access layer.

Every failure of a call to a cluster reaches callers as an ``HBaseError``
naming the cluster, its Thrift address, the operation and a one-line cause;
never as a raw thriftpy2, happybase or socket error. Tasks let these
propagate: PinLater retries the job.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

import happybase
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed
from thriftpy2.thrift import TApplicationException, TException
from thriftpy2.transport import TTransportException

from pinlater.kit.cli_output import one_line
from tasks.hbase.idl import THRIFT1, THRIFT2

T = TypeVar("T")
IDL = THRIFT1
AlreadyExists: type[Exception] = IDL.AlreadyExists
# What a server answers with when it fails a call: the connection stays usable.
SERVER_ERRORS: tuple[type[Exception], ...] = (
    IDL.IOError, IDL.IllegalArgument, THRIFT2.TIOError, THRIFT2.TIllegalArgument, TApplicationException,
)


class HBaseError(Exception):
    """A call to one HBase cluster failed."""

    def __init__(self, cluster: str, address: str, operation: str, cause: str) -> None:
        self.cluster = cluster
        self.address = address
        self.operation = operation
        self.cause = cause
        super().__init__(f"hbase {cluster} ({address}): {operation}: {cause}")

    def __reduce__(self) -> tuple[type[HBaseError], tuple[str, str, str, str]]:
        # Celery pool processes pickle a task's exception to its worker.
        return type(self), (self.cluster, self.address, self.operation, self.cause)


class HBaseUnavailable(HBaseError):
    """The cluster could not be reached, the connection broke, or the call
    timed out. Safe to retry (every write here is idempotent)."""


class HBaseRequestFailed(HBaseError):
    """The cluster answered with an error (no such table, bad filter, a region
    that stayed offline past HBase's own retries)."""


class HBaseSchemaMismatch(HBaseError):
    """A table exists with families other than its definition asks for."""


class NotThrift2Server(Exception):
    """The Thrift2 address answered, but not as a Thrift2 server (a Thrift1
    port, say): a setting points at the wrong port."""


def cause_of(exc: BaseException) -> str:
    message = getattr(exc, "message", None) if isinstance(exc, TException) else None
    return f"{type(exc).__name__}: {one_line(message if message is not None else exc) or 'no message'}"


def translate(exc: BaseException, cluster: str, address: str, operation: str) -> HBaseError | None:
    """The project's error for a failure of a call, or None if it is not one
    (a bug of the caller, say, which should surface as it is)."""
    if isinstance(exc, HBaseError):
        return exc
    if isinstance(exc, socket.timeout | TimeoutError):
        return HBaseUnavailable(cluster, address, operation, f"timed out ({cause_of(exc)})")
    if isinstance(exc, TTransportException | OSError | happybase.NoConnectionsAvailable):
        return HBaseUnavailable(cluster, address, operation, cause_of(exc))
    if isinstance(exc, NotThrift2Server):
        return HBaseUnavailable(cluster, address, operation, str(exc))
    if isinstance(exc, SERVER_ERRORS):
        return HBaseRequestFailed(cluster, address, operation, cause_of(exc))
    if isinstance(exc, TException):
        # Any other Thrift-level failure (a protocol error, a truncated frame).
        return HBaseUnavailable(cluster, address, operation, cause_of(exc))
    return None


def with_retries(attempts: int, call: Callable[[], T]) -> T:
    """``call()``, again after an ``HBaseUnavailable`` (a broken connection
    has been replaced by then) up to ``attempts`` times in all."""
    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_fixed(0.05),
        retry=retry_if_exception_type(HBaseUnavailable),
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            return call()
    raise AssertionError("unreachable: tenacity re-raises the last error")
