"""A bounded pool of Thrift2 connections to one cluster's Thrift2 server.

Binary protocol over a buffered transport: the server's defaults (thriftpy2's
compiled codecs). Behaves like ``ClusterPool`` does with happybase: every
socket has a connect and call timeout, waiting for a free connection is
bounded, a connection that fails mid-call is dropped (the next call makes a
new one), ``run`` retries an idempotent call after such a failure, and what
still fails reaches the caller as an ``HBaseError`` naming the cluster, this
Thrift2 address and the operation.

A new connection first asks ``getThriftServerType()``: a setting pointing at
a Thrift1 port (which answers ONE) or at something that is no Thrift server
fails there with one clear line, not on the first write.

A put of several calls sends them over up to the pool's size of
connections at once (``call_encoded``); ``write_width(n)``: the puts of a
block at most n at once.

``within(seconds)``: the calls of a block end by a deadline, whatever the
pool's timeouts (a lookup that moves to the standby when the primary is
late, on its caller's thread): each waits for a connection, connects and
reads until then at most, and one that meets it fails as HBaseUnavailable
without a retry. Only that connection is dropped: the server was slow,
not gone.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.thrift import TApplicationException, TClient, TMessageType
from thriftpy2.transport.buffered import TCyBufferedTransport  # type: ignore[attr-defined]
from thriftpy2.transport.socket import TSocket

from tasks.hbase.errors import SERVER_ERRORS, HBaseUnavailable, NotThrift2Server, translate, with_retries
from tasks.hbase.idl import THRIFT2
from tasks.hbase.settings import Address
from tasks.hbase.spans import traced

T = TypeVar("T")
_Socket: Any = TSocket  # untyped in thriftpy2

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("hbase_deadline", default=None)


_width: contextvars.ContextVar[int | None] = contextvars.ContextVar("hbase_write_width", default=None)


@contextlib.contextmanager
def write_width(calls: int | None) -> Iterator[None]:
    """The pre-encoded writes of the block (``call_encoded``: every put) go
    out at most ``calls`` at once (None: as many as the pool has
    connections), so a caller whose load on HBase is capped (a throttled
    backfill's page) stays within it."""
    if calls is not None and calls < 1:
        raise ValueError(f"write width must be >= 1 or None, got {calls}")
    token = _width.set(calls)
    try:
        yield
    finally:
        _width.reset(token)


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """The Thrift2 calls of the block end within ``seconds`` (module doc)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def under_deadline() -> bool:
    """Whether this code runs inside a ``within`` block."""
    return _deadline.get() is not None


class _Helpers:
    """The threads that send a call's other runs (``call_encoded``), shared
    by every pool of the process and made again in a forked child, where
    the parent's threads do not exist. They only ever wait for a pool's
    connection, never for each other, so a shared few cannot deadlock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._executor: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(HELPER_THREADS, thread_name_prefix="hbase-thrift2")
                self._pid = os.getpid()
            return self._executor


HELPER_THREADS = 8
_helpers = _Helpers()


def _overlapped(fns: Sequence[Callable[[], None]]) -> None:
    """Every one of ``fns`` run, the first on this thread and the others on
    the helpers at the same time (each in a copy of this thread's context:
    its deadline and its trace); the first error once all have ended."""
    if len(fns) == 1:
        fns[0]()
        return
    futures = [_helpers.executor().submit(contextvars.copy_context().run, fn) for fn in fns[1:]]
    errors: list[BaseException] = []
    try:
        fns[0]()
    except BaseException as exc:  # noqa: BLE001 -- kept, raised once every run has ended
        errors.append(exc)
    for future in futures:
        try:
            future.result()
        except BaseException as exc:  # noqa: BLE001 -- kept, raised once every run has ended
            errors.append(exc)
    if errors:
        raise errors[0]


class _Connection:
    def __init__(self, address: Address, timeout_s: float) -> None:
        millis = max(1, int(timeout_s * 1000))
        self.timeout_ms = millis
        self.socket = _Socket(address.host, address.port, socket_timeout=millis, connect_timeout=millis)
        self.transport = TCyBufferedTransport(self.socket)
        self.protocol = TCyBinaryProtocol(self.transport)
        self.client: Any = TClient(THRIFT2.THBaseService, self.protocol)

    def open(self) -> _Connection:
        self.transport.open()
        try:
            kind = self.client.getThriftServerType()
        except TApplicationException as exc:  # a Thrift server without the method
            self.close()
            raise NotThrift2Server(f"not a Thrift2 server: getThriftServerType() failed ({exc})") from exc
        except BaseException:
            self.close()
            raise
        if kind != THRIFT2.TThriftServerType.TWO:
            self.close()
            name = THRIFT2.TThriftServerType._VALUES_TO_NAMES.get(kind, kind)
            raise NotThrift2Server(f"not a Thrift2 server: getThriftServerType() answers {name} (a Thrift1 port?)")
        return self

    def call_encoded(self, method: str, body: bytes) -> Any:
        """Call ``method`` with its arguments already encoded (``body``: the
        args struct, as ``tasks.hbase.encode`` writes it); the answer, or
        the error, as thriftpy2's client would give them."""
        self.protocol.write_message_begin(method, TMessageType.CALL, 0)
        self.transport.write(body)
        self.protocol.write_message_end()
        self.transport.flush()
        _name, kind, _seqid = self.protocol.read_message_begin()
        if kind == TMessageType.EXCEPTION:
            error = TApplicationException()
            self.protocol.read_struct(error)
            self.protocol.read_message_end()
            raise error
        result = getattr(THRIFT2.THBaseService, f"{method}_result")()
        self.protocol.read_struct(result)
        self.protocol.read_message_end()
        for field, value in vars(result).items():  # a declared exception the server threw
            if field != "success" and value is not None:
                raise value
        return getattr(result, "success", None)

    def timeout(self, millis: int) -> None:
        """The socket's timeout for the next calls, when it is another."""
        if millis != self.timeout_ms:
            self.socket.set_timeout(millis)
            self.timeout_ms = millis

    def close(self) -> None:
        self.transport.close()


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """How a pool bounds its calls (``HBaseSettings`` has the defaults' story)."""

    size: int = 4
    call_timeout_s: float = 10.0
    pool_wait_s: float = 5.0
    attempts: int = 2


class Thrift2Pool:
    """Up to ``limits.size`` connections to ``address``, made on demand."""

    def __init__(self, cluster: str, address: Address, limits: PoolLimits = PoolLimits()) -> None:
        self.cluster = cluster
        self.address = address
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.size)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Thrift2Pool({self.cluster!r}, {self.address})"

    def _take(self, timeout_s: float) -> _Connection:
        with self._lock:
            if self._idle:
                connection = self._idle.pop()
                connection.timeout(max(1, int(timeout_s * 1000)))
                return connection
        return _Connection(self.address, timeout_s).open()

    def _once(self, operation: str, fn: Callable[[_Connection], T]) -> T:
        deadline = _deadline.get()
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise HBaseUnavailable(self.cluster, str(self.address), operation,
                                   "its caller's deadline passed before it was sent")
        wait = self.limits.pool_wait_s if left is None else min(self.limits.pool_wait_s, left)
        if not self._slots.acquire(timeout=wait):
            raise HBaseUnavailable(
                self.cluster, str(self.address), operation,
                f"no free Thrift2 connection within {wait:.2g}s (pool of {self.limits.size})",
            )
        try:
            connection = self._take(self.limits.call_timeout_s if deadline is None
                                    else min(self.limits.call_timeout_s, deadline - time.monotonic()))
            try:
                result = fn(connection)
            except SERVER_ERRORS:
                self._give_back(connection)  # a whole answer was read: the stream is in step
                raise
            except BaseException as exc:
                connection.close()  # mid-call: unread bytes or a half-sent request may remain
                if not (deadline is not None and isinstance(exc, socket.timeout)):
                    # The idle ones went to the same server: after it restarted
                    # they are all dead, and a retry must not spend its attempt
                    # on one. (A deadline met says the server was slow, not gone.)
                    self.close()
                raise
            self._give_back(connection)
            return result
        except Exception as exc:
            error = translate(exc, self.cluster, str(self.address), operation)
            if error is None:
                raise
            raise error from exc
        finally:
            self._slots.release()

    def _give_back(self, connection: _Connection) -> None:
        with self._lock:
            self._idle.append(connection)

    def run(self, operation: str, fn: Callable[[Any], T], *, idempotent: bool = True) -> T:
        """Call ``fn(client)`` with a pooled thriftpy2 client of
        ``THBaseService``. A broken connection is retried up to ``attempts``
        times if the call is idempotent; whatever still fails raises an
        ``HBaseError`` naming the cluster, this address and ``operation``."""
        return traced(self.cluster, operation, "thrift2", lambda: with_retries(
            self._attempts() if idempotent else 1,
            lambda: self._once(operation, lambda connection: fn(connection.client)),
        ))

    def _attempts(self) -> int:
        """A call under a deadline is tried once: its caller has somewhere else to go."""
        return self.limits.attempts if _deadline.get() is None else 1

    def call_encoded(self, operation: str, method: str, bodies: Sequence[bytes]) -> None:
        """Call ``method`` once per pre-encoded ``body`` (for writes whose
        arguments cost more to build as structs than to send), the bodies
        split in order into up to ``limits.size`` runs (or the block's
        ``write_width``) that go out at once,
        each on a connection of its own and retried as ``run`` retries an
        idempotent call. So the bodies must not depend on each other's
        order (puts of cells at their own timestamps do not). Returns once
        every run has ended; the first error then, if any."""
        k = max(1, min(self.limits.size, len(bodies), _width.get() or self.limits.size))
        runs = [bodies[i * len(bodies) // k:(i + 1) * len(bodies) // k] for i in range(k)]

        def sent(run: Sequence[bytes]) -> Callable[[], None]:
            def calls(connection: _Connection) -> None:
                for body in run:
                    connection.call_encoded(method, body)

            return lambda: with_retries(self._attempts(), lambda: self._once(operation, calls))

        traced(self.cluster, operation, "thrift2", lambda: _overlapped([sent(run) for run in runs]))

    def close(self) -> None:
        """Close the idle connections (one in use is kept by its call and
        closed when it fails, or given back and closed by a later close)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
