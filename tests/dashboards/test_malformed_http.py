"""Malformed HTTP, sent over raw sockets: each gets a 4xx with a one-line
JSON error, nothing lands in the log as a traceback, and the server goes
on serving everyone else."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator

import pytest

from dashboards.server import MAX_REQUEST_BYTES, Dashboard
from tests.dashboards.http import call
from tests.dashboards.support import TOKEN, Cluster, dashboard_settings

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def dash(cluster: Cluster) -> Iterator[Dashboard]:
    """A dashboard of its own over the test cluster, with a short socket timeout."""
    d = Dashboard.from_settings(dashboard_settings(), port=0, request_timeout_s=TIMEOUT_S).start()
    yield d
    d.close()


def exchange(dash: Dashboard, request: bytes, *, then_wait: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Sends ``request`` and reads one answer: (status, headers, body)."""
    host, port = dash.http.server_address[:2]
    with socket.create_connection((str(host), port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without an answer (got {data!r})"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
        length = int(headers["content-length"])
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed mid-answer"
            body += chunk
    return int(status_line.split()[1]), headers, body


def post(path: str, headers: str, body: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"X-PinLater-Token: {TOKEN}\r\nX-PinLater-Operator: tester\r\n{headers}\r\n").encode() + body


def get(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode("latin-1")


CASES = {
    "content_length_abc": (post("/api/queues/{q}/pause", "Content-Length: abc\r\n"), 400),
    "content_length_negative": (post("/api/queues/{q}/pause", "Content-Length: -5\r\n"), 400),
    "content_length_hex": (post("/api/queues/{q}/pause", "Content-Length: 0x10\r\n", b"{}"), 400),
    "content_length_conflicting": (post("/api/queues/{q}/pause", "Content-Length: 2\r\nContent-Length: 3\r\n",
                                        b"{}"), 400),
    "content_length_huge": (post("/api/queues/{q}/pause", "Content-Length: 99999999999999\r\n"), 413),
    "content_length_over_cap": (post("/api/queues/{q}/pause", f"Content-Length: {MAX_REQUEST_BYTES + 1}\r\n"), 413),
    "chunked": (post("/api/queues/{q}/pause", "Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n"), 411),
    "body_shorter_than_announced": (post("/api/queues/{q}/pause", "Content-Length: 100\r\n", b'{"a"'), 408),
    "invalid_json": (post("/api/queues/{q}/rate", "Content-Length: 8\r\n", b'{"rate":'), 400),
    "json_not_an_object": (post("/api/queues/{q}/pause", "Content-Length: 5\r\n", b"[1,2]"), 400),
    "json_nested_too_deeply": (post("/api/queues/{q}/pause", "Content-Length: 50000\r\n", b"[" * 50000), 400),
    "json_nan_token": (post("/api/queues/{q}/rate", "Content-Length: 13\r\n", b'{"rate": NaN}'), 400),
    "body_not_utf8": (post("/api/queues/{q}/pause", "Content-Length: 4\r\n", b'{"\xff"'), 400),
    "bad_percent_encoding_in_path": (get("/api/queues/%ff%fe"), 400),
    "bad_percent_encoding_in_query": (get("/api/jobs?queue=%ff&state=failed"), 400),
    "bad_ipv6_in_absolute_url": (get("http://[oops/api/overview"), 400),
    "request_line_garbage": (b"GARBAGE\r\n\r\n", 400),
    "request_line_bad_version": (b"GET / HTTP/x.y\r\nHost: 127.0.0.1\r\n\r\n", 400),
    "http_0_9": (b"GET /\r\n\r\n", 400),
    "http_0_9_and_nothing_after": (b"GET /\r\n", 400),
    "unknown_method": (b"BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n", 405),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_request_gets_a_json_4xx_and_the_server_carries_on(
    case: str, dash: Dashboard, cluster: Cluster, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    request, expected = CASES[case]
    request = request.replace(b"{q}", cluster.work.queue.encode())
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    status, headers, body = exchange(dash, request)
    assert status == expected, (case, status, body)
    if case == "body_shorter_than_announced":
        assert time.monotonic() - started < TIMEOUT_S + 5  # a bounded wait, not forever
    assert headers["content-type"] == "application/json"
    assert b"\n" not in body.strip()
    error = json.loads(body)["error"]
    assert error["code"] and error["message"], error

    # Still serving, and nothing but one-line records in the log.
    assert call(dash.url + "/healthz")[1] == "ok\n"
    assert call(dash.url + "/api/config")[0] == 200
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
    assert "Traceback" not in capsys.readouterr().err
    assert cluster.svc.queue_config(cluster.work.queue, fresh=True).paused is False  # nothing was paused


def test_keep_alive_survives_a_refused_request(dash: Dashboard) -> None:
    """A refused request closes its connection (where the next request would
    start is unknown); a well-formed one keeps it open for the next."""
    host, port = dash.http.server_address[:2]
    with socket.create_connection((str(host), port), timeout=10) as sock:
        sock.sendall(get("/healthz") + get("/healthz"))
        time.sleep(0.3)
        data = sock.recv(65536)
        assert data.count(b"HTTP/1.1 200") == 2, data


@pytest.mark.parametrize("path", ["/healthz", "/", "/api/overview"])
def test_head_is_answered_as_get_without_a_body(dash: Dashboard, path: str) -> None:
    host, port = dash.http.server_address[:2]
    connection = http.client.HTTPConnection(str(host), port, timeout=10)
    try:
        connection.request("HEAD", path)
        response = connection.getresponse()
        assert response.status == 200 and int(response.headers["Content-Length"]) > 0
        assert response.read() == b""
    finally:
        connection.close()
