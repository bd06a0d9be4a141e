"""The one hardened HTTP server (``pinlater.kit.httpserver``), against a thread
on 127.0.0.1 port 0: malformed and hostile requests get one-line errors and
close their connection, slow clients are cut off, nothing leaks a traceback
or a query string; and ``one_line``, which its errors go through. What a
client can hold of it (a request's deadline, the connection caps) is in
test_http_limits.py."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from socket import IPPROTO_TCP, TCP_NODELAY

import pytest

from pinlater.kit.cli_output import one_line
from pinlater.kit.devcerts import DevCA
from pinlater.kit.httpserver import Answer, HttpHandler, HttpServer, Request, json_answer
from pinlater.observe.metrics import Family
from pinlater.thrift.stats import MetricsServer

TIMEOUT_S = 0.5


class _Echo(HttpHandler):
    methods = frozenset({"GET", "POST"})
    max_body_bytes = 100

    def answer(self, request: Request) -> Answer:
        if request.path == "/boom":
            raise RuntimeError("secret-in-the-exception")
        if request.path == "/nodelay":
            return json_answer(200, {"nodelay": self.connection.getsockopt(IPPROTO_TCP, TCP_NODELAY)})
        return json_answer(200, {"method": request.method, "path": request.path, "pairs": request.pairs,
                                 "body": request.body.decode("latin-1")})


class _GetOnly(_Echo):
    methods = frozenset({"GET"})
    max_body_bytes = 0


@pytest.fixture(scope="module")
def echo() -> Iterator[HttpServer]:
    server = HttpServer("echo", _Echo, request_timeout_s=TIMEOUT_S).start()
    yield server
    server.stop()


@pytest.fixture
def get_only() -> Iterator[HttpServer]:
    server = HttpServer("get-only", _GetOnly, request_timeout_s=TIMEOUT_S).start()
    yield server
    server.stop()


def exchange(server: HttpServer, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends ``data`` as it is; the first answer, read until the server closes."""
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    return int(status_line.split()[1]), headers, body


def request(method: str, target: str, headers: str = "", body: bytes = b"") -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n".encode() + body


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:80", "[::1]", "[::1]:8080"])
def test_the_loopback_names_it_answers_to(echo: HttpServer, host: str) -> None:
    for data in (f"GET /ok HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(),
                 request("GET", f"http://{host}/ok")):
        assert exchange(echo, data)[0] == 200, data


def test_a_request_reaches_the_handler_parsed(echo: HttpServer) -> None:
    status, headers, body = exchange(echo, request("POST", "/a%20b?x=1&y=%C3%A9", "Content-Length: 3\r\n", b"abc"))
    assert status == 200, body
    assert json.loads(body) == {"method": "POST", "path": "/a b", "pairs": [["x", "1"], ["y", "é"]], "body": "abc"}
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert headers["server"] == "pinlater"


MALFORMED = {
    "content_length_abc": (request("POST", "/", "Content-Length: abc\r\n"), 400),
    "content_length_signed": (request("POST", "/", "Content-Length: +3\r\n", b"abc"), 400),
    "content_length_conflicting": (request("POST", "/", "Content-Length: 2\r\nContent-Length: 3\r\n", b"abc"), 400),
    "body_over_the_cap": (request("POST", "/", "Content-Length: 101\r\n", b"x" * 101), 413),
    "body_far_over_the_cap": (request("POST", "/", "Content-Length: 99999999999999\r\n"), 413),
    "chunked": (request("POST", "/", "Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n"), 411),
    "body_shorter_than_announced": (request("POST", "/", "Content-Length: 50\r\n", b"abc"), 408),
    "bad_percent_encoding": (request("GET", "/%ff%fe"), 400),
    "half_an_escape_in_the_query": (request("GET", "/?q=%e"), 400),
    "a_lone_percent_in_the_path": (request("GET", "/a%"), 400),
    "too_many_query_fields": (request("GET", "/?" + "&".join(f"a{i}=1" for i in range(20))), 400),
    "foreign_host": (b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n", 421),
    "a_second_host_header": (request("GET", "/", "Host: evil.example\r\n"), 400),
    "a_foreign_absolute_target": (request("GET", "http://evil.example/ok"), 421),
    "method_not_taken": (request("PUT", "/"), 405),
    "unknown_method": (request("BREW", "/pot"), 405),
    "request_line_garbage": (b"GARBAGE\r\n\r\n", 400),
    "http_0_9": (b"GET /\r\n\r\n", 400),
    "http_0_9_and_nothing_after": (b"GET /\r\n", 400),
    "bad_version": (b"GET / HTTP/x.y\r\nHost: 127.0.0.1\r\n\r\n", 400),
    "header_too_long": (request("GET", "/", "X-Big: " + "a" * 70_000 + "\r\n"), 431),
    "request_line_too_long": (request("GET", "/" + "a" * 70_000), 414),
    "headers_too_long_in_all": (request("GET", "/", "".join(f"X-Big-{i}: {'a' * 4000}\r\n" for i in range(20))),
                                431),
    "handler_fails": (request("GET", "/boom?token=hunter2"), 500),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_bad_request_is_one_line_of_json_and_the_server_carries_on(
    case: str, echo: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    data, expected = MALFORMED[case]
    caplog.set_level(logging.INFO)
    status, headers, body = exchange(echo, data)
    assert status == expected, (case, body)
    assert headers["content-type"] == "application/json"
    assert body.count(b"\n") == 1 and body.endswith(b"\n")
    error = json.loads(body)["error"]
    assert error and "Traceback" not in error and "secret" not in error
    if expected == 405:
        assert headers["allow"] == "GET, POST"
    # Still serving; the log has no query string, and a traceback only for the handler's own failure.
    assert exchange(echo, request("GET", "/ok"))[0] == 200
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "hunter2" not in logged
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == (["echo: GET /boom failed"] if case == "handler_fails" else [])


def test_a_get_only_server_refuses_bodies_and_answers_head_without_one(get_only: HttpServer) -> None:
    status, _, body = exchange(get_only, request("GET", "/", "Content-Length: 3\r\n", b"abc"))
    assert status == 400 and json.loads(body) == {"error": "GET takes no body"}
    status, _, body = exchange(get_only, request("GET", "/", "Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"))
    assert status == 400 and json.loads(body) == {"error": "GET takes no body"}
    assert exchange(get_only, request("GET", "/", "Content-Length: 0\r\n"))[0] == 200
    status, headers, body = exchange(get_only, request("HEAD", "/"))
    assert status == 405 and headers["allow"] == "GET" and body == b""


def test_a_client_that_stops_sending_is_cut_off(echo: HttpServer) -> None:
    started = time.monotonic()
    with socket.create_connection(echo.address, timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert sock.recv(65536) == b""  # closed, without an answer
    assert time.monotonic() - started < TIMEOUT_S + 3


def test_answers_are_sent_without_waiting_for_the_clients_ack(echo: HttpServer) -> None:
    """TCP_NODELAY: the headers and the body are two writes, and a kept-alive
    client delays its ACK of the first (measured: 45 ms a lookup, not 3)."""
    status, _headers, body = exchange(echo, request("GET", "/nodelay"))
    assert status == 200 and json.loads(body)["nodelay"] != 0


def test_keep_alive_serves_a_second_request_on_the_connection(echo: HttpServer) -> None:
    one = b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(echo.address, timeout=10) as sock:
        sock.sendall(one + one)
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk


def test_a_server_binds_loopback_by_default_and_refuses_bad_options() -> None:
    server = HttpServer("default", _Echo)
    try:
        assert server.address[0] == "127.0.0.1" and server.loopback
        assert server.url == f"http://127.0.0.1:{server.address[1]}"
    finally:
        server.stop()
    with pytest.raises(ValueError, match="max_connections >= 1"):
        HttpServer("bad", _Echo, max_connections=0)
    with pytest.raises(ValueError, match="idle_timeout_s > 0"):
        HttpServer("bad", _Echo, idle_timeout_s=0)


class _Stats:
    def snapshot(self) -> dict[str, object]:
        return {"uptime_s": 1.5}

    def families(self) -> list[Family]:
        return [Family("pinlater_server_uptime_s", "gauge", "Seconds since the server started.").add(1.5)]


def test_the_metrics_server_answers_its_paths_and_json_errors() -> None:
    server = MetricsServer(_Stats(), "127.0.0.1", 0)
    server.start()
    try:
        status, headers, body = exchange(server, request("GET", "/metrics"))
        assert status == 200 and body.startswith(
            b"# HELP pinlater_server_uptime_s Seconds since the server started.\n"
            b"# TYPE pinlater_server_uptime_s gauge\npinlater_server_uptime_s 1.5\n")
        assert b'\npinlater_http_connections_open{server="metrics"} 1\n' in body  # its own counts end it
        assert headers["content-type"].startswith("text/plain; version=0.0.4")
        status, _, body = exchange(server, request("GET", "/stats.json?x=1"))
        assert status == 200 and json.loads(body) == {"uptime_s": 1.5}
        status, _, body = exchange(server, request("GET", "/nope"))
        assert status == 404 and "/metrics" in json.loads(body)["error"]
        assert exchange(server, request("POST", "/metrics", "Content-Length: 0\r\n"))[0] == 405
    finally:
        server.stop()


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("plain", 300, "plain"),
    ("  two\n lines\tand  tabs ", 300, "two lines and tabs"),
    (b"bytes \xff", 300, "bytes \ufffd"),
    (ValueError("an exception"), 300, "an exception"),
    ("org.apache.hadoop.hbase.TableNotFoundException: t\n\tat org.apache.hadoop.hbase.X.y(X.java:42)\n"
     "\tat java.base/java.lang.Thread.run(Thread.java:829)", 300, "org.apache.hadoop.hbase.TableNotFoundException: t"),
    ("x" * 20, 10, "xxxxxxx..."),
    ("", 300, ""),
])
def test_one_line(text: object, limit: int, expected: str) -> None:
    assert one_line(text, limit) == expected


def test_https_when_given_a_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PINLATER_HTTP_TLS_CERT/_KEY turn every endpoint to HTTPS (here the
    metrics server's); a plain HTTP client gets no answer."""
    ca = DevCA()
    ca.issue("endpoint", server_names=("127.0.0.1",)).write(tmp_path / "cert.pem", tmp_path / "key.pem")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    monkeypatch.setenv("PINLATER_HTTP_TLS_CERT", str(tmp_path / "cert.pem"))
    monkeypatch.setenv("PINLATER_HTTP_TLS_KEY", str(tmp_path / "key.pem"))
    metrics = MetricsServer(_NoStats(), "127.0.0.1", 0).start()
    try:
        assert metrics.url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with urllib.request.urlopen(metrics.url + "/metrics", context=trusted, timeout=10) as response:
            assert response.status == 200 and b"# TYPE" in response.read()
        with (pytest.raises(OSError),  # not an answer: the TLS handshake fails on the HTTP request
              urllib.request.urlopen(metrics.url.replace("https", "http") + "/metrics", timeout=10) as r):
            r.read()
    finally:
        metrics.stop()


class _NoStats:
    def snapshot(self) -> dict[str, object]:
        return {}

    def families(self) -> list[Family]:
        return [Family("pinlater_server_uptime_s", "gauge", "Seconds since the server started.").add(1)]
