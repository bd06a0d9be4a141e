"""What one client can hold of the project's HTTP server (``pinlater.kit.httpserver``
with ``pinlater.kit.httplimits``), over real sockets on 127.0.0.0/8, hostile
clients bound to source addresses 127.0.0.2 and up: a request must arrive
whole within its deadline however it trickles, an idle keep-alive
connection is closed, an address over its cap has the extra connections
closed at once, a slow connection makes room for a new one, a busy one
never does, and each refusal is counted."""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from pinlater.kit.httplimits import SLOW_S
from pinlater.kit.httpserver import Answer, HttpHandler, HttpServer, Request, json_answer
from pinlater.settings import Settings
from tests.http_client import Trickler, timed_get

DEADLINE_S = 1.0


class _Echo(HttpHandler):
    methods = frozenset({"GET", "POST"})
    max_body_bytes = 1000
    release = threading.Event()

    def answer(self, request: Request) -> Answer:
        if request.path == "/wait":  # busy answering until the test says
            self.release.wait(10)
        return json_answer(200, {"path": request.path, "body": len(request.body)})


@pytest.fixture
def server() -> Iterator[HttpServer]:
    s = HttpServer("limits", _Echo, request_timeout_s=DEADLINE_S, idle_timeout_s=5.0).start()
    yield s
    _Echo.release.set()
    s.stop()


def wait_closed(sock: socket.socket, within_s: float) -> tuple[bytes, float]:
    """What the server sent until it closed ``sock`` and when (monotonic);
    fails if it is still open after ``within_s``."""
    deadline = time.monotonic() + within_s
    data = b""
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"still open after {within_s}s (got {data!r})"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return data, time.monotonic()
        data += chunk


TRICKLED = {
    # the request line and headers, a byte every 0.2 s, never their end
    "head": (b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 100),
    # a whole head, then the body a byte every 0.2 s
    "body": (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n\r\n", b"b" * 500),
    # a whole request and the start of a second one in one packet, the rest trickled
    "pipelined": (b"GET /one HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /two HTTP/1.1\r\n", b"X-Slow: " + b"s" * 100),
}


@pytest.mark.parametrize("case", list(TRICKLED))
def test_a_request_trickled_past_its_deadline_is_closed_and_counted(case: str, server: HttpServer) -> None:
    """Every byte comes well within any per-read timeout; the request as a
    whole does not come within its deadline, so the connection is closed
    at the deadline (a body cut short is answered 408 first)."""
    first, trickle = TRICKLED[case]
    with socket.create_connection(server.address, timeout=10) as sock:
        started = time.monotonic()  # the request's first byte
        sock.sendall(first or trickle[:1])
        answered = b""
        if case == "pipelined":
            while b'"path":"/one"' not in answered:
                answered += sock.recv(65536)
        for byte in trickle[0 if first else 1 :]:
            if select.select([sock], [], [], 0.2)[0] or time.monotonic() - started > DEADLINE_S + 3:
                break  # answered or closed (or far past the deadline: the test fails below)
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
        data, closed_at = wait_closed(sock, DEADLINE_S + 3)
        data = answered + data
    assert DEADLINE_S - 0.1 <= closed_at - started <= DEADLINE_S + 1.5, closed_at - started
    if case == "body":
        assert data.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1s" in data
    elif case == "pipelined":
        assert data.count(b"HTTP/1.1 200 ") == 1 and b'"path":"/one"' in data
    else:
        assert data == b""
    assert server.counters["request_timeouts"] == 1
    assert timed_get(server.address, "/after")[0] == 200


def test_an_idle_keep_alive_connection_is_closed_after_its_own_timeout() -> None:
    server = HttpServer("idle", _Echo, request_timeout_s=5.0, idle_timeout_s=0.5).start()
    try:
        with socket.create_connection(server.address, timeout=10) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answered = time.monotonic()
            data, closed_at = wait_closed(sock, 4)
        assert data.startswith(b"HTTP/1.1 200 ")
        assert 0.4 <= closed_at - answered <= 2.5
        assert server.counters["request_timeouts"] == 0  # idle is not a timed-out request
    finally:
        server.stop()


def test_an_address_over_its_cap_has_the_extra_connections_closed_while_another_is_served() -> None:
    """Four connections of 127.0.0.2 are kept (half a request each); its
    fifth and sixth are closed at once, counted; 127.0.0.1 is answered."""
    server = HttpServer("per-client", _Echo, request_timeout_s=5.0, max_connections=16,
                        max_connections_per_client=4).start()
    try:
        with Trickler(server.address, 6, per_address=6) as hostile:
            assert hostile.closed_by_server(within_s=0.5) == {4, 5}
            status, elapsed = timed_get(server.address, "/other")
            assert status == 200 and elapsed < 1.0
            hostile.step()
            assert hostile.closed_by_server(within_s=0.3) == {4, 5}  # the four kept are still open
        assert server.counters["connections_over_client_limit"] == 2
        assert server.counters["connections_refused"] == server.counters["connections_shed"] == 0
    finally:
        server.stop()


def test_an_address_at_its_cap_sheds_its_own_slow_connection_for_a_new_client() -> None:
    """One address may be many clients (a proxy, loopback): four slow
    connections of 127.0.0.2 at its cap of four do not lock out a normal
    client from the same address; the one longest without activity goes."""
    server = HttpServer("same-address", _Echo, request_timeout_s=5.0, max_connections=16,
                        max_connections_per_client=4).start()
    try:
        with Trickler(server.address, 4, per_address=4) as hostile:
            time.sleep(SLOW_S + 0.3)
            connection = http.client.HTTPConnection(*server.address, timeout=5, source_address=("127.0.0.2", 0))
            try:
                connection.request("GET", "/same")
                assert connection.getresponse().status == 200
            finally:
                connection.close()
            assert len(hostile.closed_by_server(within_s=1.0)) == 1
        assert server.counters["connections_shed"] == 1
        assert server.counters["connections_over_client_limit"] == 0
    finally:
        server.stop()


def test_when_every_slot_is_taken_a_slow_connection_makes_room() -> None:
    """With one slot, held by a request begun more than SLOW_S ago and
    still mid-headers: a new connection takes it at once (the slow one
    closed, counted) instead of waiting for the holder's deadline."""
    server = HttpServer("one-slot", _Echo, request_timeout_s=5.0, max_connections=1).start()
    try:
        with Trickler(server.address, 1) as hostile:
            time.sleep(SLOW_S + 0.3)
            status, elapsed = timed_get(server.address, "/next")
            assert status == 200 and elapsed < 1.0
            assert hostile.closed_by_server(within_s=1.0) == {0}
        assert server.counters["connections_shed"] == 1 and server.counters["connections_refused"] == 0
    finally:
        server.stop()


def test_when_every_connection_is_answering_a_new_one_is_refused_at_once() -> None:
    """A connection busy answering is never shed: with the only slot busy,
    a new connection is closed at once, counted, and the busy one answers."""
    _Echo.release.clear()
    server = HttpServer("busy", _Echo, request_timeout_s=5.0, max_connections=1).start()
    try:
        with socket.create_connection(server.address, timeout=10) as busy:
            busy.sendall(b"GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            time.sleep(0.3)
            with socket.create_connection(server.address, timeout=10) as late:
                late.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                started = time.monotonic()
                data, closed_at = wait_closed(late, 2.0)
                assert data == b"" and closed_at - started < 1.0
            _Echo.release.set()
            data, _ = wait_closed(busy, 5.0)
            assert data.startswith(b"HTTP/1.1 200 ")
        assert server.counters["connections_refused"] == 1 and server.counters["connections_shed"] == 0
    finally:
        _Echo.release.set()
        server.stop()


def test_the_limits_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINLATER_HTTP_REQUEST_TIMEOUT_S", "2.5")
    monkeypatch.setenv("PINLATER_HTTP_IDLE_TIMEOUT_S", "7")
    monkeypatch.setenv("PINLATER_HTTP_MAX_CONNECTIONS", "9")
    monkeypatch.setenv("PINLATER_HTTP_MAX_CONNECTIONS_PER_CLIENT", "3")
    server = HttpServer("from-env", _Echo, max_connections=11)  # one given: it wins
    try:
        limits = server.limits
        assert (limits.request_timeout_s, limits.idle_timeout_s) == (2.5, 7.0)
        assert (limits.max_connections, limits.max_connections_per_client) == (11, 3)
    finally:
        server.stop()
    defaults = Settings().http_limits
    assert 1 <= defaults.request_timeout_s <= 10 and defaults.max_connections >= 100
