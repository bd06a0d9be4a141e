"""Client connections to a list of PinLater servers: pooling, timeouts and
failover. Retrying is the caller's business (``pinlater.thrift.client``);
this module only says, for every failure, whether the request may have
reached a server:

* ``ServerUnavailable``: no server took the request (refused connections,
  dead pooled connections, a send cut short: a partial frame is never
  run). Safe to retry any call.
* ``CallFailed``: the request was sent and the reply never came (timeout,
  connection reset): the call may or may not have run.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from thriftpy2.thrift import TApplicationException

from pinlater.errors import EnqueueOutcomeUnknown, PinLaterError, ShardConnectionFailed
from pinlater.settings import parse_address
from pinlater.thrift.framing import (
    CALL,
    EXCEPTION,
    REPLY,
    FrameError,
    FrameReader,
    PeerClosed,
    decode_message,
    encode_message,
)
from pinlater.thrift.walk import check_message

log = logging.getLogger(__name__)

MAX_REPLY_FRAME = 512 * 1024 * 1024
# Pooled connections idle longer than this are closed rather than reused,
# well before the server's idle timeout could close them under a request.
MAX_IDLE_S = 60.0


class ServerUnavailable(ShardConnectionFailed):
    """No PinLater server could be reached: the request was not sent."""


class CallFailed(ShardConnectionFailed):
    """The request was sent but no reply came: it may or may not have run."""


class EnqueueCallFailed(CallFailed, EnqueueOutcomeUnknown):
    """An enqueue was sent but no reply came: its jobs may or may not be
    stored, as when a shard goes silent after an enqueue in process."""


class UnknownMethod(PinLaterError):
    """The server does not have the method (TApplicationException
    UNKNOWN_METHOD): a stock PinLater server asked for an extension."""


class _NotSent(Exception):
    pass


class Connection:
    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        # One timeout for every send and receive on this socket, set once:
        # each settimeout is a system call.
        sock.settimeout(timeout_s)
        self.sock = sock
        self.timeout_s = timeout_s
        self.reader = FrameReader(sock, MAX_REPLY_FRAME)
        self.seqid = 0
        self.last_used = time.monotonic()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def usable(self) -> bool:
        """Still open and in sync: nothing to read (a server that closed
        the connection shows EOF here, before anything is sent on it, and
        a reset shows an error)."""
        if time.monotonic() - self.last_used > MAX_IDLE_S:
            return False
        try:
            # Readable means EOF, an error, or bytes nobody asked for.
            if not self._poll.poll(0):
                return True
            return isinstance(self.sock, ssl.SSLSocket) and self._only_tls_records()
        except OSError:
            return False

    def _only_tls_records(self) -> bool:
        """What arrived is TLS housekeeping (a session ticket), not data."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(1)
            return False  # data nobody asked for, or EOF
        except ssl.SSLWantReadError:
            return True
        finally:
            self.sock.settimeout(self.timeout_s)

    def call(self, name: str, args: Any, result: Any) -> Any:
        self.seqid = (self.seqid + 1) & 0x7FFFFFFF
        data = encode_message(name, CALL, self.seqid, args)
        timeout_s = self.timeout_s
        try:
            self.sock.sendall(data)
        except OSError as exc:
            if isinstance(self.sock, ssl.SSLSocket) and self.seqid == 1:
                raise _NotSent(f"TLS: the server closed the connection after the handshake; did it refuse "
                               f"this client's certificate? ({exc})") from exc
            raise _NotSent(f"send failed: {exc}") from exc
        try:
            frame = self.reader.read_frame(frame_timeout_s=timeout_s, idle_timeout_s=timeout_s)
        except ssl.SSLError as exc:
            if "ALERT" in str(exc.reason):  # the server refused our certificate: nothing ran
                raise _NotSent(f"TLS: the server refused this client's certificate ({exc.reason})") from exc
            raise CallFailed(f"{name}: {type(exc).__name__}: {exc}") from exc
        except (OSError, FrameError, PeerClosed) as exc:
            raise CallFailed(f"{name}: {type(exc).__name__}: {exc}") from exc
        try:
            if frame is None:
                raise CallFailed(f"{name}: no reply within {timeout_s:g}s, or the server closed the connection")
            header = check_message(frame)
        except (OSError, FrameError, PeerClosed) as exc:
            raise CallFailed(f"{name}: {type(exc).__name__}: {exc}") from exc
        if header.seqid != self.seqid or header.name != name:
            raise CallFailed(f"{name}: reply out of sequence ({header.name} #{header.seqid})")
        self.last_used = time.monotonic()
        if header.mtype == EXCEPTION:
            app = decode_message(frame, TApplicationException())
            error = UnknownMethod if app.type == TApplicationException.UNKNOWN_METHOD else PinLaterError
            raise error(f"server refused {name}: {app.message or app.type}")
        if header.mtype != REPLY:
            raise CallFailed(f"{name}: unexpected message type {header.mtype}")
        return decode_message(frame, result)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass(eq=False)
class Endpoint:
    host: str
    port: int
    idle: list[Connection] = field(default_factory=list)
    down_until: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class ServerPool:
    def __init__(
        self,
        servers: list[str],
        *,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        pool_size: int = 8,
        down_for_s: float = 2.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls``: a client context (``pinlater.kit.tls.ClientTls``) to speak
        TLS to every server; the host name given in ``servers`` must be in
        the server's certificate."""
        if not servers:
            raise ValueError("at least one server address is needed")
        self.endpoints = [Endpoint(*parse_address(s)) for s in servers]
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.pool_size = pool_size
        self.down_for_s = down_for_s
        self.tls = tls
        self._next = itertools.count()
        self._closed = False

    def _order(self) -> list[Endpoint]:
        """Round robin over the servers, the ones recently down last."""
        n = len(self.endpoints)
        if n == 1:
            return self.endpoints
        start = next(self._next) % n
        rotated = self.endpoints[start:] + self.endpoints[:start]
        now = time.monotonic()
        return [e for e in rotated if e.down_until <= now] + [e for e in rotated if e.down_until > now]

    def _checkout(self, ep: Endpoint) -> Connection:
        with ep.lock:
            while ep.idle:
                conn = ep.idle.pop()
                if conn.usable():
                    return conn
                conn.close()
        sock = socket.create_connection((ep.host, ep.port), timeout=self.connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:  # the handshake within the connect timeout
                sock = self.tls.wrap_socket(sock, server_hostname=ep.host)
            except BaseException:
                sock.close()
                raise
        return Connection(sock, self.timeout_s)

    def _checkin(self, ep: Endpoint, conn: Connection) -> None:
        with ep.lock:
            if not self._closed and len(ep.idle) < self.pool_size:
                ep.idle.append(conn)
                return
        conn.close()

    def call(self, name: str, args: Any, result: Any) -> Any:
        """One try: the first server that takes the request answers it."""
        failures: list[str] = []
        for ep in self._order():
            try:
                conn = self._checkout(ep)
            except OSError as exc:
                ep.down_until = time.monotonic() + self.down_for_s
                failures.append(f"{ep}: {exc}")
                continue
            try:
                reply = conn.call(name, args, result)
            except _NotSent as exc:
                conn.close()
                ep.down_until = time.monotonic() + self.down_for_s
                failures.append(f"{ep}: {exc}")
                continue
            except CallFailed as exc:
                conn.close()
                log.warning("%s on %s failed after sending: %s", name, ep, exc)
                raise CallFailed(f"{exc} (server {ep})") from exc
            except PinLaterError:
                self._checkin(ep, conn)
                raise
            except BaseException:
                conn.close()
                raise
            self._checkin(ep, conn)
            ep.down_until = 0.0
            return reply
        raise ServerUnavailable(f"no PinLater server took {name}: {'; '.join(failures)}")

    def close(self) -> None:
        self._closed = True
        for ep in self.endpoints:
            with ep.lock:
                idle, ep.idle = ep.idle, []
            for conn in idle:
                conn.close()
