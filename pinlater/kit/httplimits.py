"""What bounds a client of the project's HTTP endpoints (``pinlater.kit.httpserver``):
the limits themselves (``HttpLimits``, from the ``PINLATER_HTTP_*`` settings),
the request deadline (``DeadlineReader``), the admission of connections
(``ConnectionTable``) and the counts of what was refused (``HttpCounters``).

The admission follows the Thrift server's (``pinlater.thrift.server``): at
most ``max_connections_per_client`` connections from one client address,
further ones closed at once; when all ``max_connections`` are open, a new
connection takes the slot of an idle or slow one, from the address holding
the most connections, the one longest without activity; it is refused only
when every connection is answering, or connected or began its request less
than ``SLOW_S`` ago. So a flood of trickling connections sheds its own
connections, not a normal client's. An address at its own limit sheds its
own idle or slow connections the same way before it is refused (one
address may be many clients: a proxy, or loopback).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pinlater.observe.metrics import Family

log = logging.getLogger("pinlater.kit.httpserver")

# A request not whole this long after its first byte is slow: when every
# slot is taken, its connection may be closed for another. Slow, not only
# stalled (nothing received for a while, the Thrift server's test): a flood
# trickling its bytes in step is never stalled just after a byte, and a
# client arriving then would be refused. A normal request arrives whole in
# a few milliseconds.
SLOW_S = 1.0
# A request's header lines together (the stdlib bounds each line to 64 KiB
# and their number to 100, which alone would let a request hold 6.4 MiB).
MAX_HEADER_BYTES = 64 * 1024
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a reset

COUNTERS = (
    "connections_open", "connections_total", "connections_refused", "connections_over_client_limit",
    "connections_shed", "request_timeouts",
)
_HELP = {
    "connections_open": ("gauge", "Open client connections."),
    "connections_total": ("counter", "Client connections accepted."),
    "connections_refused": ("counter", "Connections closed at once: every slot answering or in a new request."),
    "connections_over_client_limit": ("counter", "Connections closed at once: their address held its limit."),
    "connections_shed": ("counter", "Idle or slow connections closed to make room for others."),
    "request_timeouts": ("counter", "Connections closed: a request not whole within the request timeout."),
}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one client may hold of an HTTP endpoint (defaults: ``Settings``'s)."""

    request_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    max_connections_per_client: int

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_connections_per_client < 1:
            raise ValueError(f"need max_connections >= 1 and max_connections_per_client >= 1, got "
                             f"{self.max_connections}, {self.max_connections_per_client}")
        if not (self.request_timeout_s > 0 and self.idle_timeout_s > 0):
            raise ValueError(f"need request_timeout_s > 0 and idle_timeout_s > 0, got {self.request_timeout_s}, "
                             f"{self.idle_timeout_s}")


def http_limits() -> HttpLimits:
    """The limits of PINLATER_HTTP_REQUEST_TIMEOUT_S and the others."""
    from pinlater.settings import Settings

    return Settings.from_env().http_limits


class HttpCounters:
    """The counts of one HTTP server (``COUNTERS``), as metric families too."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTERS, 0)

    def count(self, name: str, delta: int = 1) -> None:
        with self._lock:
            self._values[name] += delta

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def families(self) -> list[Family]:
        """``pinlater_http_<counter>{server="<name>"}`` (``pinlater.observe.metrics``)."""
        out = []
        for name, value in self.snapshot().items():
            kind, text = _HELP[name]
            metric = f"pinlater_http_{name}" + ("_total" if kind == "counter" and not name.endswith("_total") else "")
            out.append(Family(metric, kind, text).add(value, server=self.server))
        return out


class RequestTimeout(TimeoutError):
    """A request not whole within its deadline."""


class DeadlineReader(io.RawIOBase):
    """The raw stream under a connection's ``rfile``: a request must arrive
    whole within ``request_timeout_s`` of its first byte, however its bytes
    trickle (each ``recv`` waits only for the time left). Before its first
    request and between requests a connection may idle ``idle_timeout_s``,
    then reads as closed.

    ``start_request`` starts the clock of a request whose first bytes are
    already buffered (a pipelining client); ``between_requests`` stops it."""

    def __init__(self, sock: socket.socket, limits: HttpLimits, on_timeout: Callable[[], None]) -> None:
        super().__init__()
        self.sock = sock
        self.limits = limits
        self.on_timeout = on_timeout
        # When the current request's first byte arrived (None between requests).
        self.started: float | None = None
        self.last_progress = time.monotonic()

    def readable(self) -> bool:
        return True

    def between_requests(self) -> None:
        self.started = None

    def start_request(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self.started is None:
            self.sock.settimeout(self.limits.idle_timeout_s)
            try:
                n = self.sock.recv_into(buffer)
            except TimeoutError:
                return 0  # idle too long: as if closed
            if n:
                self.start_request()
        else:
            left = self.started + self.limits.request_timeout_s - time.monotonic()
            if left <= 0:
                raise self._timed_out()
            self.sock.settimeout(left)
            try:
                n = self.sock.recv_into(buffer)
            except TimeoutError:
                raise self._timed_out() from None
        if n:
            self.last_progress = time.monotonic()
        return n

    def _timed_out(self) -> RequestTimeout:
        self.on_timeout()
        return RequestTimeout(f"the request did not arrive whole within {self.limits.request_timeout_s:g}s")


class RequestStream(io.BufferedReader):
    """A connection's ``rfile``: buffered over its ``DeadlineReader``, and
    once ``count_header_lines`` is called, the lines read (the headers)
    are refused past MAX_HEADER_BYTES in all, as a line too long (431)."""

    def __init__(self, raw: DeadlineReader) -> None:
        super().__init__(raw)
        self._header_budget: int | None = None

    def count_header_lines(self, budget: int | None) -> None:
        """Bound the lines read from now on to ``budget`` bytes (None: no bound)."""
        self._header_budget = budget

    def readline(self, size: int | None = -1) -> bytes:
        budget = self._header_budget
        if budget is None:
            return super().readline(size)
        wanted = budget + 1 if size is None or size < 0 else min(size, budget + 1)
        line = super().readline(wanted)
        self._header_budget = budget - len(line)
        if self._header_budget < 0:
            raise http.client.LineTooLong(f"the request's headers (at most {MAX_HEADER_BYTES} bytes in all)")
        return line


class HttpConnection:
    """One client connection of an HTTP server, as its ``ConnectionTable``
    sees it. ``busy``: its request was read whole and is being answered;
    a busy connection is never shed. ``closing``: shed, its thread ends
    quietly. Both change under ``_lock``."""

    def __init__(self, sock: socket.socket, address: str, limits: HttpLimits, counters: HttpCounters) -> None:
        self.sock = sock
        self.address = address
        self.reader = DeadlineReader(sock, limits, lambda: counters.count("request_timeouts"))
        self.busy = False
        self.closing = False
        self._accepted_at = time.monotonic()
        self._answered_at = 0.0
        self._lock = threading.Lock()

    def last_activity(self) -> float:
        return max(self.reader.last_progress, self._answered_at)

    def stalled(self, now: float) -> bool:
        """Idle after an answer, silent SLOW_S since its accept (not the new
        connection of a client about to send), or in a slow request."""
        if self.busy or self.closing:
            return False
        started = self.reader.started
        if started is None:
            return self._answered_at > 0 or now - self._accepted_at >= SLOW_S
        return now - started >= SLOW_S

    def begin_answer(self) -> bool:
        """Marks the connection busy; False if it was shed meanwhile."""
        with self._lock:
            if self.closing:
                return False
            self.busy = True
            return True

    def end_answer(self) -> None:
        with self._lock:
            if self.busy:
                self.busy = False
                self._answered_at = time.monotonic()

    def shed(self) -> bool:
        """Closes the connection unless it is answering: with a reset, so
        that a peer still sending learns at once; its blocked read returns."""
        with self._lock:
            if self.busy or self.closing:
                return False
            self.closing = True
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        return True


class Held(Protocol):
    """A connection, as ``ConnectionTable`` sees it."""

    @property
    def address(self) -> str: ...

    def last_activity(self) -> float: ...

    def stalled(self, now: float) -> bool:
        """Idle between requests, or in a request begun SLOW_S ago or more."""
        ...

    def shed(self) -> bool:
        """Closes the connection unless it is busy answering; whether it did."""
        ...


C = TypeVar("C", bound=Held)


class ConnectionTable(Generic[C]):
    """The open connections of one server, by client address, under its
    two caps (see the module doc)."""

    def __init__(self, name: str, limits: HttpLimits, counters: HttpCounters) -> None:
        self.name = name
        self.limits = limits
        self.counters = counters
        self._lock = threading.Lock()
        self._open: set[C] = set()
        self._by_address: dict[str, set[C]] = {}
        self._last_refusal_log: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: C) -> bool:
        """Takes ``conn`` in, shedding another if all slots are taken; False
        (counted, logged at most once a second per reason) if refused."""
        with self._lock:
            refusal = self._refusal(conn.address)
            if refusal is None:
                self._open.add(conn)
                self._by_address.setdefault(conn.address, set()).add(conn)
        if refusal is not None:
            self._refused(conn.address, refusal)
            return False
        self.counters.count("connections_total")
        self.counters.count("connections_open")
        return True

    def forget(self, conn: C) -> None:
        """Frees the slot of a connection that closed (if not freed already)."""
        with self._lock:
            self._remove(conn)

    def shed_all(self) -> None:
        """Closes every connection not busy answering (when stopping)."""
        with self._lock:
            for conn in list(self._open):
                if conn.shed():
                    self._remove(conn)

    def _refusal(self, address: str) -> str | None:
        held = self._by_address.get(address)
        # At its own limit, an address sheds an idle or slow connection of
        # its own: behind a proxy (or on loopback) one address is many
        # clients, and a stranger's idle sockets must not lock out the rest.
        if (held is not None and len(held) >= self.limits.max_connections_per_client
                and not self._shed_one([held])):
            return "connections_over_client_limit"
        if len(self._open) >= self.limits.max_connections and not self._shed_one():
            return "connections_refused"
        return None

    def _shed_one(self, among: list[set[C]] | None = None) -> bool:
        """Closes the idle or slow connection longest without activity, of
        the address holding the most (of ``among``'s addresses if given)."""
        now = time.monotonic()
        for conns in among or sorted(self._by_address.values(), key=len, reverse=True):
            for conn in sorted(conns, key=lambda c: c.last_activity()):
                if conn.stalled(now) and conn.shed():
                    self._remove(conn)
                    self.counters.count("connections_shed")
                    log.debug("%s: closed a connection from %s to make room", self.name, conn.address)
                    return True
        return False

    def _remove(self, conn: C) -> None:
        if conn not in self._open:
            return
        self._open.discard(conn)
        held = self._by_address.get(conn.address)
        if held is not None:
            held.discard(conn)
            if not held:
                del self._by_address[conn.address]
        self.counters.count("connections_open", -1)

    def _refused(self, address: str, counter: str) -> None:
        self.counters.count(counter)
        now = time.monotonic()
        with self._lock:
            if now - self._last_refusal_log.get(counter, 0.0) < 1.0:
                return  # a flood would write a line per connection
            self._last_refusal_log[counter] = now
        if counter == "connections_over_client_limit":
            log.warning("%s: refusing connections from %s: it holds %d connections, the limit per client address",
                        self.name, address, self.limits.max_connections_per_client)
        else:
            log.warning("%s: refusing connections from %s: all %d connections are answering or receiving",
                        self.name, address, self.limits.max_connections)
