"""The PinLater Thrift server: framed transport, binary protocol.

Concurrency: one thread per connection, capped at ``max_connections``.
Thrift connections are long-lived and carry one call at a time, in order;
a worker pool smaller than the number of open connections would need a
selector in front to multiplex idle connections (TNonblockingServer's
design) and a slow call would still hold a worker. A thread per connection
lets a slow call (a regex count, a shard timing out) block only its own
connection, the shard I/O releases the GIL, and an idle thread costs a
little memory and no CPU. 200 connections are 200 mostly-sleeping threads.
One process runs Python on one core at a time: ``pinlater server
--processes N`` (``pinlater.thrift.supervisor``) runs N of these servers on
one shared listening socket; every limit below is then per process.

Calls into the job service are capped separately (``max_concurrent_calls``,
64 by default): each call holds a shard connection, a Redis shard's pool has
256 (``pinlater.stores.redis.pool``; a call past them waits, then fails
as ShardBusy, load rather than an outage, so the shard stays in rotation),
every MySQL connection is a server thread, and on a few cores more calls at
once add latency, not throughput. A slow call holds one of the 64 slots,
not the server. A server may give some methods slots of their own
(``call_classes``): calls of other methods that hang then cannot hold
them up (the Contacts Service's lookups beside its updates).

Concurrent enqueues and dequeues of one source (and ACKs, with
``PINLATER_SERVER_COALESCE_ACKS=1``) of a queue are merged into one shard
call each while one is in flight (``pinlater.thrift.coalesce``, on unless
``PINLATER_SERVER_COALESCE=0``); a call alone goes at once.

Hostile or broken clients (defaults from ``pinlater.settings``):

* A frame must arrive whole within ``frame_timeout_s`` (30 s) of its first
  byte, however slowly the bytes trickle; a reply must be sent within the
  same time. Between frames a connection may idle ``idle_timeout_s``.
* One client address holds at most ``max_connections_per_client`` (64)
  connections; more are closed at once.
* When all ``max_connections`` (1024) are open, a new connection takes the
  slot of an idle one (between calls, or stalled a second mid-frame): from
  the address holding the most connections, the one longest without
  activity. Only when every connection is in a call or receiving is it
  refused. So a flood, even from many addresses, sheds its own idle
  connections and not a normal client's.
* Requests over 64 KiB are buffered only within ``max_buffered_bytes``
  (256 MiB) across connections (``pinlater.thrift.resources.ByteBudget``);
  stalled ones are shed to make room, and past that a request is drained
  unread and answered with an error.
* An unknown method is answered from the message header alone; a known
  one is walked within its bounds (``pinlater.thrift.bounds``: its own
  lists within its call's limits, everything else within a small
  allowance) before anything is decoded, so a frame costs at most what its
  call may cost, whatever its size (``handle``, ``pinlater.thrift.calls``).

TLS and roles (``pinlater.thrift.security``): with a certificate, each
connection's thread does the TLS handshake within the frame timeout, after
peeking at the first byte: a client that is not speaking TLS is closed
before any TLS work. A connection in its handshake is idle for shedding.
With roles, every call's method is checked against the caller's
certificate names (``pinlater.thrift.access``) from its header, before its
arguments are walked or decoded, and its queues once they are, before it
reaches the job service; ``request_reload`` (SIGHUP) reloads the files.

Shutdown (``stop``): stop accepting, wake idle connections so they close,
let calls in flight finish and send their replies, then close what is left
after ``grace_s``.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from pinlater.errors import ErrorCode, PinLaterError
from pinlater.limits import FRAME_BODIES
from pinlater.observe import tracing
from pinlater.observe.metrics import Source
from pinlater.observe.seam import job_store_families
from pinlater.service import JobService
from pinlater.thrift import STRUCTS, access, idl
from pinlater.thrift.bounds import CallBounds, call_bounds
from pinlater.thrift.calls import CallDispatch, Signature, signatures
from pinlater.thrift.connection import Connection
from pinlater.thrift.convert import to_wire_error, trace_carrier
from pinlater.thrift.handler import Handler
from pinlater.thrift.resources import ByteBudget, raise_open_files_limit, return_large_buffers_to_the_os
from pinlater.thrift.security import Security, check_exposure
from pinlater.thrift.stats import MetricsServer, ServerStats

log = logging.getLogger(__name__)

FRAME_SLACK = 1024 * 1024


def default_max_frame(max_body_bytes: int) -> int:
    """Room for a batch of FRAME_BODIES bodies of the maximum size, plus slack."""
    return FRAME_BODIES * max_body_bytes + FRAME_SLACK


class FramedServer(CallDispatch):
    """A framed, binary-protocol Thrift server for one service: the
    connections, limits, TLS and roles described above, with the calls'
    hooks (``pinlater.thrift.calls``) left to the service's own subclass."""

    def __init__(
        self,
        handler: Any,
        methods: dict[str, Signature],
        bounds: dict[str, CallBounds],
        host: str,
        port: int,
        *,
        service_name: str,
        label: str,
        security: Security,
        max_frame_bytes: int,
        max_connections: int,
        max_connections_per_client: int,
        max_buffered_bytes: int,
        max_concurrent_calls: int,
        idle_timeout_s: float,
        frame_timeout_s: float,
        stats: ServerStats,
        metrics_port: int | None = None,
        metrics_more: Source | None = None,
        listener: socket.socket | None = None,
        accept_gate: Callable[[], bool] | None = None,
        observe_stats: bool = True,
        call_classes: Mapping[str, str] | None = None,
    ) -> None:
        self.service_name = service_name
        self.label = label  # in the log: "<label> on host:port", "<label> stopped"
        self.methods = methods
        self.security = security
        self.handler = handler
        self.max_frame = max_frame_bytes
        self.bounds = bounds
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self._call_slots = threading.BoundedSemaphore(max_concurrent_calls)
        # Methods of a class share max_concurrent_calls slots of their own.
        call_classes = call_classes or {}
        classes = {name: threading.BoundedSemaphore(max_concurrent_calls) for name in set(call_classes.values())}
        self._class_slots = {method: classes[name] for method, name in call_classes.items()}
        self.idle_timeout_s = idle_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.stats = stats
        self.budget = ByteBudget(max_buffered_bytes, self.stats)
        self._listener = listener or socket.create_server((host, port), backlog=1024)
        self._accept_gate = accept_gate
        bound = self._listener.getsockname()
        self.host: str = host if listener is None else bound[0]
        self.port: int = bound[1]
        self.metrics = MetricsServer(self.stats, host, metrics_port, metrics_more) if metrics_port is not None else None
        if observe_stats:
            tracing.observe_metrics(self.stats.families)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._reload = threading.Event()
        self._last_denial_log: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._conns: set[Connection] = set()
        self._by_address: dict[str, set[Connection]] = {}
        self._last_refusal_log: dict[str, float] = {}
        self._accept_thread: threading.Thread | None = None
        # Accepted connections whose thread is not started yet, fewest
        # connections from their address first (see _starter_loop).
        self._to_start: list[tuple[int, int, Connection]] = []
        self._to_start_cond = threading.Condition(self._lock)
        self._seq = 0
        self._starter_thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> Self:
        # A connection is a file descriptor; keep some for shards and logs.
        raise_open_files_limit(self.max_connections + 256)
        return_large_buffers_to_the_os()
        if self.max_frame > self.budget.capacity:
            log.warning("frames over %d bytes (the buffer budget) will be refused; the frame limit is %d bytes",
                        self.budget.capacity, self.max_frame)
        if self.metrics is not None:
            self.metrics.start()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="pinlater-accept", daemon=True)
        self._starter_thread = threading.Thread(target=self._starter_loop, name="pinlater-starter", daemon=True)
        self._starter_thread.start()
        self._accept_thread.start()
        log.info(
            "%s on %s:%d%s (max frame %d bytes, max %d connections, %d per client address, "
            "%d bytes buffered, frame timeout %gs, idle timeout %gs)%s",
            self.label, self.host, self.port, self._security_text(), self.max_frame, self.max_connections,
            self.max_connections_per_client, self.budget.capacity, self.frame_timeout_s, self.idle_timeout_s,
            f", metrics on http://{self.host}:{self.metrics.port}/metrics" if self.metrics else "",
        )
        return self

    def _security_text(self) -> str:
        if self.security.context is None:
            return ""
        if self.security.access is not None:
            return f" with TLS, client certificates and {len(self.security.access.grants)} identities' roles"
        return " with TLS and client certificates" if self.security.tls and self.security.tls.client_ca else " with TLS"

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context new connections take (None: plain TCP)."""
        return self.security.context

    def request_stop(self) -> None:
        """Sets a flag; a signal handler must not call it (``pinlater.kit.signals``)."""
        self._stopping.set()

    def request_reload(self) -> None:
        """On SIGHUP (through ``pinlater.kit.signals``): ``serve_forever`` reloads
        the TLS files and the roles within half a second."""
        self._reload.set()

    def serve_forever(self, grace_s: float = 30.0) -> None:
        """Runs until ``request_stop`` (e.g. on SIGTERM), then stops gracefully."""
        if self._accept_thread is None:
            self.start()
        while not self._stopping.wait(0.5):
            if self._reload.is_set():
                self._reload.clear()
                self.security.reload()
        self.stop(grace_s)

    def stop(self, grace_s: float = 30.0) -> None:
        if self._stopped.is_set():
            return
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join()
        with self._lock:
            self._to_start_cond.notify_all()
        if self._starter_thread is not None:
            self._starter_thread.join()
        # Only now, with both threads gone, is the queue final: the accept
        # loop may push one more connection after the starter saw the flag.
        with self._lock:
            unstarted = [conn for _, _, conn in self._to_start]
            self._to_start.clear()
        for conn in unstarted:
            conn.close()
            self.forget(conn)
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
        log.info("%s stopped", self.label)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- accepting --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        # Gated: wait at most briefly in accept, so that a turn that passed
        # to another process while waiting is noticed.
        self._listener.settimeout(0.2 if self._accept_gate is None else 0.05)
        while not self._stopping.is_set():
            if self._accept_gate is not None and not self._accept_gate():
                self._stopping.wait(0.01)
                continue
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
            address = str(addr[0])
            with self._lock:
                refusal = self._admit(address)
                if refusal is None:
                    conn = Connection(self, sock, address, f"{addr[0]}:{addr[1]}")
                    self._conns.add(conn)
                    held = self._by_address.setdefault(address, set())
                    held.add(conn)
                    self._seq += 1
                    heapq.heappush(self._to_start, (len(held), self._seq, conn))
                    self._to_start_cond.notify()
            if refusal is not None:
                self._refuse(sock, address, refusal)
                continue
            self.stats.count("connections_total")
            self.stats.count("connections_open")

    def _starter_loop(self) -> None:
        """Starts the threads of accepted connections, those of addresses
        holding the fewest connections first.

        Starting a thread costs far more than accepting (0.1 to 0.3 ms on a
        busy machine: the new thread has to run before ``start`` returns),
        so the accept loop only accepts, and drains the kernel's queue
        quickly. A client with one or two connections is then started ahead
        of the hundreds a flooding address has waiting, instead of behind
        them (measured: its first call took up to 0.8 s under a flood of
        1,200 connections without this)."""
        while True:
            with self._lock:
                while not self._to_start and not self._stopping.is_set():
                    self._to_start_cond.wait(0.5)
                if self._stopping.is_set():
                    return  # ``stop`` closes those never started
                _, _, conn = heapq.heappop(self._to_start)
            conn.thread.start()

    def _admit(self, address: str) -> str | None:
        """None if a connection from ``address`` may be opened, else the
        counter of the refusal (under the lock).

        A connection that would pass a limit takes the slot of one that is
        idle (between calls) or stalled (nothing received for a second in
        the middle of a frame), the one longest without activity: at the
        limit per address, one of that address's own (dead connections
        whose peer never closed them, a client behind a black hole, must
        not lock its other clients out until the idle timeout); when every
        slot is taken, one of the address holding the most. Only if none
        can be shed (every one is in a call or receiving) is it refused. A
        client finds a shed idle connection closed before it sends on it
        (``pinlater.thrift.pool``) and opens another.
        """
        held = self._by_address.get(address)
        if held is not None and len(held) >= self.max_connections_per_client and not self._shed_one([held]):
            return "connections_over_client_limit"
        if len(self._conns) >= self.max_connections and not self._shed_one(
                sorted(self._by_address.values(), key=len, reverse=True)):
            return "connections_refused"
        return None

    def _shed_one(self, groups: Iterable[set[Connection]]) -> bool:
        now = time.monotonic()
        for conns in groups:
            for conn in sorted(conns, key=Connection.last_activity):
                if conn.stalled(now, idle_ok=True) and conn.shed():
                    self._remove(conn)
                    self.stats.count("connections_shed")
                    log.debug("closed connection from %s to make room", conn.peer)
                    return True
        return False

    def _refuse(self, sock: socket.socket, address: str, counter: str) -> None:
        self.stats.count(counter)
        # A flood would write a line per connection: one a second per reason.
        now = time.monotonic()
        if now - self._last_refusal_log.get(counter, 0.0) >= 1.0:
            self._last_refusal_log[counter] = now
            if counter == "connections_over_client_limit":
                log.warning("refusing connections from %s: it holds %d connections, the limit per client address",
                            address, self.max_connections_per_client)
            else:
                log.warning("refusing connections from %s: all %d connections are busy",
                            address, self.max_connections)
        with contextlib.suppress(OSError):
            sock.close()

    def _remove(self, conn: Connection) -> None:
        """Frees ``conn``'s slot (under the lock)."""
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        held = self._by_address.get(conn.address)
        if held is not None:
            held.discard(conn)
            if not held:
                del self._by_address[conn.address]
        self.stats.count("connections_open", -1)

    def forget(self, conn: Connection) -> None:
        """Frees the slot of a connection that has closed (its own thread,
        or ``stop`` for one never started)."""
        with self._lock:
            self._remove(conn)


_PINLATER_METHODS = signatures(STRUCTS)


class ThriftServer(FramedServer):
    """The job service's server: ``pinlater.thrift.pinlater``'s methods on a
    JobService (``pinlater.thrift.handler``)."""

    def __init__(
        self,
        job_service: JobService,
        host: str = "127.0.0.1",
        port: int = 9010,
        *,
        metrics_port: int | None = 9011,
        max_frame_bytes: int | None = None,
        max_connections: int | None = None,
        max_connections_per_client: int | None = None,
        max_buffered_bytes: int | None = None,
        max_concurrent_calls: int = 64,
        idle_timeout_s: float | None = None,
        frame_timeout_s: float | None = None,
        handler: Any = None,
        listener: socket.socket | None = None,
        stats: ServerStats | None = None,
        accept_gate: Callable[[], bool] | None = None,
        security: Security | None = None,
    ) -> None:
        """Limits left as None come from the service's settings
        (PINLATER_SERVER_MAX_CONNECTIONS and the others).

        One process of several (``pinlater.thrift.supervisor``) is given the
        ``listener`` they share (``host`` and ``port`` are then its own), its
        ``stats`` slot, and an ``accept_gate``: it accepts only while the
        gate says it is its turn.

        ``security`` (default: from the service's settings,
        PINLATER_SERVER_TLS_* and PINLATER_SERVER_ROLES): TLS and roles.
        An address other than loopback is refused (a TlsConfigError)
        unless clients must present certificates (a client CA), or
        PINLATER_SERVER_INSECURE says otherwise."""
        settings = job_service.settings
        security = security if security is not None else Security.from_settings(settings)
        if listener is None:
            check_exposure(host, security, settings.server_insecure)
        self.service = job_service
        super().__init__(
            handler or Handler(job_service), _PINLATER_METHODS, call_bounds(settings), host, port,
            service_name="PinLater",
            label="pinlater thrift server",
            security=security,
            max_frame_bytes=max_frame_bytes or default_max_frame(settings.max_body_bytes),
            max_connections=max_connections or settings.server_max_connections,
            max_connections_per_client=max_connections_per_client or settings.server_max_connections_per_client,
            max_buffered_bytes=max_buffered_bytes or settings.server_max_buffered_bytes,
            max_concurrent_calls=max_concurrent_calls,
            idle_timeout_s=settings.server_idle_timeout_s if idle_timeout_s is None else idle_timeout_s,
            frame_timeout_s=settings.server_frame_timeout_s if frame_timeout_s is None else frame_timeout_s,
            stats=stats or ServerStats(),
            metrics_port=metrics_port,
            metrics_more=lambda: job_store_families(job_service.operators.store_metrics_snapshot()),
            listener=listener,
            accept_gate=accept_gate,
            # One of several: their parent sends the summed stats.
            observe_stats=stats is None,
        )

    # -- the job service's side of each call (pinlater.thrift.calls) ----------------------
    def wire_error(self, exc: Exception) -> tuple[Any, str] | None:
        if isinstance(exc, PinLaterError):
            return to_wire_error(exc), exc.code.name
        return None

    def internal_error(self, message: str) -> tuple[Any, str]:
        return idl.PinLaterException(errorCode=int(ErrorCode.UNKNOWN), message=message), ErrorCode.UNKNOWN.name

    def refusal_error(self, method: str, message: str) -> tuple[Any, str]:
        code = ErrorCode.ENQUEUE_REJECTED if method == "enqueueJobs" else ErrorCode.UNKNOWN
        return idl.PinLaterException(errorCode=int(code), message=message), code.name

    def check_arguments(self, grant: access.Grant, names: tuple[str, ...], method: str, args: Any) -> None:
        access.check_queues(grant, method, args, self._queue_exists)

    def filter_result(self, grant: access.Grant, method: str, value: Any) -> Any:
        if grant.queues is not None and method == "getQueueNames":
            return {queue for queue in value if grant.may_touch(queue)}
        return value

    def trace_parent(self, given: dict[str, Any]) -> Any:
        return trace_carrier(given.get("context"))

    def _queue_exists(self, name: str) -> bool:
        self.service.queue_config(name)
        return True
