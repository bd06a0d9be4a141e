"""Client helpers of the tests of the ``pinlater.kit.httpserver`` servers (the feed
endpoint, the typeahead, the dashboard, the metrics endpoint): one request,
a raw exchange, the check that an error is one line of JSON without a
traceback, a CLI's ``serve`` run as a subprocess, and hostile clients that
trickle their requests (``Trickler``)."""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pinlater.kit.httpserver import HttpServer
from tests.servers import REPO, free_port


def request(server: HttpServer, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
    """Status, parsed JSON (None for an empty body) and the raw body."""
    host, port = server.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        if raw:
            assert response.getheader("Content-Type") == "application/json"
        return response.status, json.loads(raw) if raw else None, raw
    finally:
        connection.close()


def assert_error(raw: bytes, answer: Any) -> None:
    """One line of JSON holding only a one-line message: no traceback."""
    assert raw.count(b"\n") == 1 and raw.endswith(b"\n")
    assert set(answer) == {"error"} and answer["error"] and "Traceback" not in answer["error"]


def raw_exchange(server: HttpServer, data: bytes) -> bytes:
    """Send bytes as they are; everything the server answers until it closes."""
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


MALFORMED = [
    (b"NONSENSE\r\n\r\n", b"400"),
    (b"GET /healthz\r\n\r\n", b"400"),  # HTTP/0.9
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", b"400"),  # a body on a GET
    (b"GET /healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n", b"421"),  # DNS rebinding
]


def assert_malformed_answered(server: HttpServer, data: bytes, status: bytes) -> None:
    """A malformed request gets its status and a one-line JSON error, then the server closes."""
    answer = raw_exchange(server, data)  # returns once the server closes the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == status, answer
    assert_error(body, json.loads(body))


@contextlib.contextmanager
def serving(module: str, *args: str, env: Mapping[str, str], command: str = "serve") -> Iterator[str]:
    """``python -m module serve *args`` (or ``command``); yields its first line on stdout
    (``... listening on HOST:PORT``, or "" when it exited first), then stops
    it with SIGTERM, which must end it with status 0 and no traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, command, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(env),
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        yield process.stdout.readline().rstrip("\n")
        process.send_signal(signal.SIGTERM)
        # Generous: beside five test processes and two HBase clusters, one
        # typeahead server took over 10 s to exit once (its status is what counts).
        assert process.wait(timeout=30) == 0
        assert "Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


# Where ``serve`` listens: its *_HTTP setting, with --host and --port each
# overriding their half. {env} and {flag} are free ports; 192.0.2.1 (a
# documentation address) is none of ours, so only a --host over it can listen.
ServeCase = tuple[str, tuple[str, ...], str]  # the setting, flags, where it listens
SERVE_ADDRESSES: list[ServeCase] = [
    ("127.0.0.1:{env}", (), "127.0.0.1:{env}"),
    ("127.0.0.1:{env}", ("--port", "{flag}"), "127.0.0.1:{flag}"),
    ("192.0.2.1:{env}", ("--host", "127.0.0.1"), "127.0.0.1:{env}"),
]
# *_HTTP values ``serve`` refuses with "VARIABLE: must look like HOST:PORT ...".
BAD_HTTP = ["127.0.0.1:0", "127.0.0.1:65536", ":8090", "localhost:", "localhost:²"]


def listening_line(module: str, variable: str, case: ServeCase, env: Mapping[str, str],
                   command: str = "serve") -> tuple[str, str]:
    """``serve``'s first line with ``variable`` and the flags of a
    ``SERVE_ADDRESSES`` case, and the address that line should name."""
    ports = {"env": free_port(), "flag": free_port()}
    setting, flags, address = case
    with serving(module, *(f.format(**ports) for f in flags), env={**env, variable: setting.format(**ports)},
                 command=command) as line:
        return line, address.format(**ports)


SLOW_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 200


class Trickler:
    """``count`` hostile connections to ``address``, ``per_address`` from each
    of the source addresses 127.0.0.2, 127.0.0.3, ... (so a test stands for
    many clients on loopback), each sending ``SLOW_REQUEST`` one byte a
    ``step``; never the end of its headers. Closes them all on exit."""

    def __init__(self, address: tuple[str, int], count: int, per_address: int = 1) -> None:
        if count < 1 or per_address < 1 or 2 + (count - 1) // per_address > 254:
            raise ValueError("needs source addresses 127.0.0.2 to 127.0.0.254 only")
        self.address, self.count, self.per_address = address, count, per_address
        self.socks: list[socket.socket] = []
        self.closed: set[int] = set()  # indexes of the connections the server closed
        self._sent = 0

    def __enter__(self) -> Trickler:
        for i in range(self.count):
            source = f"127.0.0.{2 + i // self.per_address}"
            self.socks.append(socket.create_connection(self.address, timeout=5, source_address=(source, 0)))
        self.step()
        return self

    def step(self) -> None:
        """One more byte on every connection still open."""
        byte = SLOW_REQUEST[self._sent % len(SLOW_REQUEST) : self._sent % len(SLOW_REQUEST) + 1]
        self._sent += 1
        for i, sock in enumerate(self.socks):
            if i not in self.closed:
                try:
                    sock.sendall(byte)
                except OSError:
                    self.closed.add(i)

    def closed_by_server(self, within_s: float) -> set[int]:
        """The connections the server has closed (a reset or the end of the
        stream), watching them all for ``within_s``."""
        deadline = time.monotonic() + within_s
        while (left := deadline - time.monotonic()) > 0:
            watched = {sock: i for i, sock in enumerate(self.socks) if i not in self.closed}
            readable, _, _ = select.select(list(watched), [], [], left)
            for sock in readable:
                try:
                    if sock.recv(1) == b"":
                        self.closed.add(watched[sock])
                except OSError:
                    self.closed.add(watched[sock])
        return set(self.closed)

    def __exit__(self, *exc: object) -> None:
        for sock in self.socks:
            sock.close()


def timed_get(address: tuple[str, int], path: str, timeout_s: float = 5.0) -> tuple[int, float]:
    """A normal client's GET over a new connection: (status, seconds to the whole answer)."""
    started = time.monotonic()
    connection = http.client.HTTPConnection(*address, timeout=timeout_s)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()
