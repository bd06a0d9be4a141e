"""The PinLater Thrift server: framed transport, binary protocol.

Concurrency: one thread per connection, capped at ``max_connections``.
Thrift connections are long-lived and carry one call at a time, in order;
a worker pool smaller than the number of open connections would need a
selector in front to multiplex idle connections (TNonblockingServer's
design) and a slow call would still hold a worker. A thread per connection
lets a slow call (a regex count, a shard timing out) block only its own
connection, the shard I/O releases the GIL, and an idle thread costs a
little memory and no CPU. 200 connections are 200 mostly-sleeping threads.

Calls into the job service are capped separately (``max_concurrent_calls``,
64 by default): the shard clients' connection pools are finite (redis-py's
default pool refuses a 101st connection, and the shard is then taken out of
rotation), and on a few cores more calls at once add latency, not
throughput. A slow call holds one of the 64 slots, not the server.

Shutdown (``stop``): stop accepting, wake idle connections so they close,
let calls in flight finish and send their replies, then close what is left
after ``grace_s``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import Any

from thriftpy2.thrift import TApplicationException

from pinlater.errors import ErrorCode, PinLaterError
from pinlater.service import JobService
from pinlater.thrift import idl, service
from pinlater.thrift.convert import to_wire_error
from pinlater.thrift.framing import (
    CALL,
    EXCEPTION,
    ONEWAY,
    REPLY,
    FrameError,
    FrameReader,
    FrameTooLarge,
    PeerClosed,
    check_message,
    decode_message,
    encode_message,
    read_header,
)
from pinlater.thrift.handler import Handler
from pinlater.thrift.stats import MetricsServer, ServerStats

log = logging.getLogger(__name__)

FRAME_SLACK = 1024 * 1024
METHODS = frozenset(service.thrift_services)


def default_max_frame(max_body_bytes: int) -> int:
    """Room for a batch of 16 bodies of the maximum size, plus slack."""
    return 16 * max_body_bytes + FRAME_SLACK


class ThriftServer:
    def __init__(
        self,
        job_service: JobService,
        host: str = "127.0.0.1",
        port: int = 9010,
        *,
        metrics_port: int | None = 9011,
        max_frame_bytes: int | None = None,
        max_connections: int = 1024,
        max_concurrent_calls: int = 64,
        idle_timeout_s: float = 600.0,
        frame_timeout_s: float = 30.0,
        handler: Any = None,
    ) -> None:
        self.service = job_service
        self.handler = handler or Handler(job_service)
        self.max_frame = max_frame_bytes or default_max_frame(job_service.settings.max_body_bytes)
        self.max_connections = max_connections
        self._call_slots = threading.BoundedSemaphore(max_concurrent_calls)
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.stats = ServerStats()
        self._listener = socket.create_server((host, port), backlog=1024)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self.metrics = MetricsServer(self.stats, host, metrics_port) if metrics_port is not None else None
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[_Connection] = set()
        self._accept_thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> ThriftServer:
        if self.metrics is not None:
            self.metrics.start()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="pinlater-accept", daemon=True)
        self._accept_thread.start()
        log.info(
            "pinlater thrift server on %s:%d (max frame %d bytes, max %d connections)%s",
            self.host, self.port, self.max_frame, self.max_connections,
            f", metrics on http://{self.host}:{self.metrics.port}/metrics" if self.metrics else "",
        )
        return self

    def request_stop(self) -> None:
        """Safe from a signal handler: only sets a flag."""
        self._stopping.set()

    def serve_forever(self, grace_s: float = 30.0) -> None:
        """Runs until ``request_stop`` (e.g. on SIGTERM), then stops gracefully."""
        if self._accept_thread is None:
            self.start()
        while not self._stopping.wait(0.5):
            pass
        self.stop(grace_s)

    def stop(self, grace_s: float = 30.0) -> None:
        if self._stopped.is_set():
            return
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join()
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        log.info("stopping: %d connections open, %d calls in flight", len(conns), self.stats.in_flight)
        for conn in conns:
            conn.wake_if_idle()
        deadline = time.monotonic() + grace_s
        for conn in conns:
            conn.thread.join(max(0.0, deadline - time.monotonic()))
        for conn in conns:
            if conn.thread.is_alive():
                log.warning("closing connection from %s with a call still running after %.0fs", conn.peer, grace_s)
                conn.force_close()
        if self.metrics is not None:
            self.metrics.stop()
        self._stopped.set()
        log.info("pinlater thrift server stopped")

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- accepting --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stopping.is_set():
            try:
                sock, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    break
                log.warning("accept failed: %s", exc)  # e.g. out of file descriptors
                time.sleep(0.05)
                continue
            with self._lock:
                full = len(self._conns) >= self.max_connections
                if not full:
                    conn = _Connection(self, sock, f"{addr[0]}:{addr[1]}")
                    self._conns.add(conn)
            if full:
                self.stats.count("connections_refused")
                log.warning("refusing connection from %s: %d connections open", addr, self.max_connections)
                sock.close()
                continue
            self.stats.count("connections_total")
            self.stats.count("connections_open")
            conn.thread.start()

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)
        self.stats.count("connections_open", -1)

    # -- one call ------------------------------------------------------------------------
    def handle(self, frame: bytes) -> tuple[bytes | None, bool]:
        """(reply to send or None, whether the connection stays usable)."""
        try:
            header = check_message(frame)
        except FrameError as exc:
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"malformed message: {exc}"), False
        if header.mtype not in (CALL, ONEWAY):
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"message type {header.mtype} is not a call"), False
        name = header.name
        if name not in METHODS:
            self.stats.record("unknown_method", 0.0, "UNKNOWN_METHOD")
            unknown = TApplicationException(TApplicationException.UNKNOWN_METHOD, f"no method {name!r} in PinLater")
            return encode_message(name, EXCEPTION, header.seqid, unknown), True
        try:
            args = decode_message(frame, getattr(service, name + "_args")())
        except Exception as exc:  # noqa: BLE001 -- anything the decoder throws is the frame's fault
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"undecodable {name} arguments: {exc}"), False
        result = getattr(service, name + "_result")()
        started = time.perf_counter()
        code: str | None = None
        self.stats.count("in_flight")
        try:
            with self._call_slots:
                value = getattr(self.handler, name)(*(args.__dict__[spec[1]] for spec in args.thrift_spec.values()))
            if "success" in result.__dict__:
                result.success = value
        except PinLaterError as exc:
            code = exc.code.name
            log.debug("%s: %s: %s", name, code, exc.message)
            result.e = to_wire_error(exc)
        except Exception as exc:  # noqa: BLE001 -- must answer, never crash
            code = ErrorCode.UNKNOWN.name
            log.exception("%s failed unexpectedly", name)
            result.e = idl.PinLaterException(
                errorCode=int(ErrorCode.UNKNOWN), message=f"internal error in {name}: {type(exc).__name__}: {exc}"
            )
        finally:
            self.stats.count("in_flight", -1)
            self.stats.record(name, time.perf_counter() - started, code)
        if header.mtype == ONEWAY:
            return None, True
        try:
            return encode_message(name, REPLY, header.seqid, result), True
        except Exception as exc:  # noqa: BLE001
            log.exception("could not encode the %s reply", name)
            app = TApplicationException(TApplicationException.INTERNAL_ERROR, f"could not encode the reply: {exc}")
            return encode_message(name, EXCEPTION, header.seqid, app), True

    @staticmethod
    def _protocol_error(frame: bytes, message: str) -> bytes | None:
        """An EXCEPTION reply if the header can be read at all."""
        try:
            header, _ = read_header(frame)
        except FrameError:
            return None
        exc = TApplicationException(TApplicationException.PROTOCOL_ERROR, message)
        return encode_message(header.name, EXCEPTION, header.seqid, exc)

    def oversized_reply(self, head: bytes, too_large: FrameTooLarge) -> bytes | None:
        """The answer to a frame over the limit that was read and dropped."""
        try:
            header, _ = read_header(head)
        except FrameError:
            return None
        if header.name not in METHODS:
            return None
        code = ErrorCode.ENQUEUE_REJECTED if header.name == "enqueueJobs" else ErrorCode.UNKNOWN
        self.stats.record(header.name, 0.0, code.name)
        result = getattr(service, header.name + "_result")()
        result.e = idl.PinLaterException(
            errorCode=int(code),
            message=f"request of {too_large.size} bytes is over the server's limit of {too_large.limit} bytes",
        )
        return encode_message(header.name, REPLY, header.seqid, result)


class _Connection:
    """One client connection and its thread."""

    def __init__(self, server: ThriftServer, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.reader = FrameReader(sock, server.max_frame)
        self.idle = True
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name=f"pinlater-conn-{peer}", daemon=True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def run(self) -> None:
        server = self.server
        try:
            while True:
                with self._lock:
                    self.idle = True
                if server.stopping:
                    return
                try:
                    frame = self.reader.read_frame(
                        frame_timeout_s=server.frame_timeout_s, idle_timeout_s=server.idle_timeout_s
                    )
                except FrameTooLarge as exc:
                    if not self._drop_oversized(exc):
                        return
                    continue
                except (FrameError, PeerClosed, OSError) as exc:
                    server.stats.count("bad_frames")
                    log.info("closing connection from %s: %s", self.peer, exc or type(exc).__name__)
                    return
                if frame is None:
                    return
                with self._lock:
                    self.idle = False
                reply, keep = server.handle(frame)
                if reply is not None:
                    self.sock.sendall(reply)
                if not keep:
                    log.info("closed connection from %s after a malformed frame", self.peer)
                    return
        except OSError as exc:
            log.info("connection from %s failed: %s", self.peer, exc)
        except Exception:  # noqa: BLE001 -- a connection thread must never take the server down
            log.exception("connection from %s failed", self.peer)
        finally:
            self._close()
            server._forget(self)

    def _drop_oversized(self, exc: FrameTooLarge) -> bool:
        """Drains a frame up to 4x the limit (bounded memory) and answers it
        with an error; anything bigger closes the connection."""
        self.server.stats.count("bad_frames")
        if exc.size > 4 * exc.limit:
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        log.warning("dropping a request from %s: %s", self.peer, exc)
        try:
            head = self.reader.discard(exc.size, keep=512)
        except (PeerClosed, OSError):
            return False
        reply = self.server.oversized_reply(head, exc)
        if reply is None:
            return False
        self.sock.sendall(reply)
        return True

    def wake_if_idle(self) -> None:
        """Shutdown: an idle connection's blocked recv returns at once."""
        with self._lock:
            if self.idle and self.reader.between_frames:
                self._shutdown()

    def force_close(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
