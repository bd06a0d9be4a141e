"""Errors of the HBase access layer.

Every failure of a call to a cluster reaches callers as an ``HBaseError``
naming the cluster, its Thrift address, the operation and a one-line cause;
never as a raw thriftpy2, happybase or socket error. Tasks let these
propagate: PinLater retries the job.
"""

from __future__ import annotations

import socket
import sys

import happybase
from thriftpy2.thrift import TApplicationException, TException
from thriftpy2.transport import TTransportException

# happybase loads HBase's Thrift1 IDL at import time as the module Hbase_thrift.
IDL = sys.modules["Hbase_thrift"]
AlreadyExists: type[Exception] = IDL.AlreadyExists
_SERVER_ERRORS: tuple[type[Exception], ...] = (IDL.IOError, IDL.IllegalArgument, TApplicationException)


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


def one_line(text: object, limit: int = 300) -> str:
    """The first line of an error message (HBase sends whole Java stack traces)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


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
    if isinstance(exc, _SERVER_ERRORS):
        return HBaseRequestFailed(cluster, address, operation, cause_of(exc))
    if isinstance(exc, TException):
        # Any other Thrift-level failure (a protocol error, a truncated frame).
        return HBaseUnavailable(cluster, address, operation, cause_of(exc))
    return None
