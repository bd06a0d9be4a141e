# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""``pinlater://``: a Kombu transport whose task queues are PinLater queues.

Broker URL: ``pinlater://`` (the alias is registered by ``workers.app``):
the job service is configured by the ``PINLATER_*`` environment.
``pinlater://HOST:PORT`` reaches it through the PinLater Thrift server at
that address instead (port 9010 if left out), and Kombu's failover list
``pinlater://h1:p1;pinlater://h2:p2`` moves to the next server when one
cannot be reached. Broadcast traffic goes to ``PINLATER_BUS_URL`` (see
``workers.settings``).

The transport is asynchronous: in a worker it hooks into Celery's event
loop (the hub) with one file descriptor, its pub/sub connection, which
carries wake-ups and broadcast messages, and one tick callback that
delivers, claims (batched, capped by the prefetch window), flushes ACKs
and heartbeats. An idle worker sleeps in the hub until a wake-up, a
broadcast, or the slow poll of its queues. Clients without a hub
(``celery inspect``, Flower's event receiver) use ``drain_events``, which
does the same in a blocking loop.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from dataclasses import replace
from typing import Any

import redis
from kombu.transport import virtual

from pinlater.errors import NoHealthyShards, PinLaterError, ShardConnectionFailed
from pinlater.kit.redisconn import tls_options
from pinlater.thrift import DEFAULT_SERVER_PORT
from pinlater.thrift.client import ThriftClient
from workers.bus import BusNames, Subscriber
from workers.channel import Channel
from workers.client import ensure_queue, process_source, shared_client
from workers.pid import current_pid
from workers.settings import TransportSettings

log = logging.getLogger(__name__)

_bus_lock = threading.Lock()
_bus_clients: dict[tuple[int, str], redis.Redis[bytes]] = {}
# drain_events: while messages are out for processing on other threads
# (pool result handlers ack there), look for freed room this often.
UNSETTLED_POLL_S = 0.01
MAX_ROUNDS_PER_TICK = 8


def bus_client(url: str) -> redis.Redis[bytes]:
    key = (current_pid(), url)
    with _bus_lock:
        client = _bus_clients.get(key)
        if client is None:
            client = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30, **tls_options(url))
            _bus_clients[key] = client
        return client


class Transport(virtual.Transport):
    Channel = Channel
    driver_type = "pinlater"
    driver_name = "pinlater"
    implements = virtual.Transport.implements.extend(
        asynchronous=True,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )
    connection_errors = (  # type: ignore[assignment]
        *virtual.Transport.connection_errors,
        ShardConnectionFailed, NoHealthyShards, redis.ConnectionError, redis.TimeoutError, OSError,
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        settings = TransportSettings.from_options(client.transport_options)
        if client.hostname:
            # The URL names the Thrift server (one per URL; Kombu fails over
            # between the URLs of a list).
            server = f"{client.hostname}:{client.port or DEFAULT_SERVER_PORT}"
            settings = replace(settings, pinlater=replace(settings.pinlater, servers=(server,)))
        self.settings = settings
        self._connect_timeout_s = float(getattr(client, "connect_timeout", None) or 5.0)
        self._service: tuple[int, Any] | None = None
        self._bus: tuple[int, redis.Redis[bytes]] | None = None
        self.names = BusNames(self.settings.bus_prefix)
        self.subscriber = Subscriber(self.bus, self.names)
        self._loop: Any = None
        self._reader_fd: int | None = None
        self._wake_at = math.inf
        self._pipe: tuple[int, int] | None = None
        self._poked = False
        self._ensured: set[tuple[int, str]] = set()
        self._draining = 0  # drain_events calls running (any thread)

    # Kept per process id, so a transport object that crossed a fork never
    # uses its parent's sockets or claim source (and a publish does not pay
    # for hashing the settings to find them again).
    @property
    def service(self) -> Any:
        pid = current_pid()
        if self._service is None or self._service[0] != pid:
            self._service = (pid, shared_client(self.settings.pinlater))
        return self._service[1]

    @property
    def source(self) -> str:
        return process_source()

    @property
    def bus(self) -> redis.Redis[bytes]:
        pid = current_pid()
        if self._bus is None or self._bus[0] != pid:
            self._bus = (pid, bus_client(self.settings.bus_url))
        return self._bus[1]

    @property
    def default_connection_params(self) -> dict[str, Any]:
        # No host: the job service and bus come from settings, not the URL.
        return {"hostname": None, "port": None}

    def driver_version(self) -> str:
        return "pinlater"

    def ensure_queue(self, queue: str, again: bool = False) -> None:
        key = (current_pid(), queue)
        if again or key not in self._ensured:
            ensure_queue(self.service, queue)
            self._ensured.add(key)

    def establish_connection(self) -> Any:
        if self.settings.pinlater.servers:
            self._probe_server(self.settings.pinlater.servers[0])
        self.bus.ping()
        return super().establish_connection()

    def _probe_server(self, server: str) -> None:
        """One call, no retries: Kombu retries and fails over itself, and a
        server that is not there must fail fast and as a connection error."""
        timeout = self._connect_timeout_s
        probe = ThriftClient([server], retries=0, timeout_s=timeout, connect_timeout_s=timeout,
                             tls=self.settings.pinlater.client_tls)
        try:
            probe.queue_names()
        except PinLaterError as exc:
            raise ShardConnectionFailed(f"no PinLater server at {server}: {exc}") from None
        finally:
            probe.close()

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            if self._loop is not None and self._reader_fd is not None:
                self._loop.remove_reader(self._reader_fd)
                self._reader_fd = None
            if self._loop is not None and self._pipe is not None:
                self._loop.remove_reader(self._pipe[0])
                for fd in self._pipe:
                    os.close(fd)
                self._pipe = None
            self.subscriber.close()

    def on_settled(self) -> None:
        """A message was acked or rejected (any thread)."""

    def settles_at_once(self) -> bool:
        return self._loop is None and not self._draining

    # -- the work of one turn ---------------------------------------------------------
    def pump(self) -> int:
        now = time.monotonic()
        delivered = 0
        for channel in list(self.channels):
            if not channel.closed:
                delivered += channel.pump(now)
        return delivered

    def _next_due(self, now: float) -> float:
        due = now + 3600.0
        for channel in list(self.channels):
            if not channel.closed:
                due = min(due, channel.next_due(now))
        return due

    def _unsettled(self) -> bool:
        # Kombu's virtual QoS has no public count of unacked messages: it
        # keeps delivered tags in _delivered and acked ones in _dirty until
        # its next _flush; _qos is None on a channel that never made one.
        # Checked against Kombu 5.7 (tests/unit/test_third_party_guards.py).
        for channel in list(self.channels):
            qos = channel._qos
            if qos is not None and (len(qos._delivered) > len(qos._dirty) or qos.has_pending()):
                return True
        return False

    # -- blocking clients -------------------------------------------------------------
    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        self._draining += 1
        try:
            delivered = self._drain(timeout)
        finally:
            self._draining -= 1
        if delivered and self.settles_at_once():
            # What the callbacks acked goes out now, in one call per queue.
            for channel in list(self.channels):
                if not channel.closed:
                    channel.flush_acks()

    def _drain(self, timeout: float | None) -> int:
        start = time.monotonic()
        while True:
            self.subscriber.read(0.0)
            delivered = self.pump()
            if delivered:
                return delivered
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                raise TimeoutError()
            wait = self._next_due(now) - now
            if timeout is not None:
                wait = min(wait, start + timeout - now)
            if self._unsettled():
                wait = min(wait, UNSETTLED_POLL_S)
            self.subscriber.read(max(0.0, wait))

    # -- the worker's event loop ------------------------------------------------------
    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self._loop = loop
        if self._pipe is None:
            # Readable while this transport has work due now: the hub computes
            # its poll timeout before the tick callbacks run, so work found
            # during a tick must wake the poll that follows.
            self._pipe = os.pipe()
            os.set_blocking(self._pipe[0], False)
            os.set_blocking(self._pipe[1], False)
            loop.add_reader(self._pipe[0], self._on_poked)
        loop.on_tick.add(self._on_tick)

    def _poke(self) -> None:
        if not self._poked and self._pipe is not None:
            self._poked = True
            os.write(self._pipe[1], b"\0")

    def _on_poked(self) -> None:
        self._poked = False
        if self._pipe is not None:
            with contextlib.suppress(BlockingIOError):
                os.read(self._pipe[0], 4096)

    def _on_tick(self) -> None:
        loop = self._loop
        fd = self.subscriber.fileno()
        if fd != self._reader_fd:
            # (Re)connected pub/sub socket: watch the new one.
            if self._reader_fd is not None:
                loop.remove_reader(self._reader_fd)
            if fd is not None:
                loop.add_reader(fd, self._on_readable)
            self._reader_fd = fd
        # A few rounds per tick while work is due now (a solo pool runs and
        # ACKs tasks inside the delivery, so room comes back at once).
        delivered = 0
        for _ in range(MAX_ROUNDS_PER_TICK):
            n = self.pump()
            delivered += n
            now = time.monotonic()
            due = self._next_due(now)
            if not n or due > now:
                break
        if due <= now or delivered:
            # Also after a delivery: Celery may have queued the task with
            # call_soon, which runs only once the poll returns.
            self._poke()
        elif due < self._wake_at - 0.001 or self._wake_at <= now:
            # Nothing else may wake the hub when a claim comes due (slow
            # poll, end of a rate-limit wait, heartbeat): a timer does. The
            # hub computed this turn's poll timeout before the tick, so the
            # poke makes it compute the next one with this timer in it.
            self._wake_at = due
            loop.call_later(max(0.0, due - now), self._on_wake_timer)
            self._poke()

    def _on_wake_timer(self) -> None:
        self._wake_at = math.inf

    def _on_readable(self) -> None:
        self.subscriber.read(0.0)
        self.pump()
