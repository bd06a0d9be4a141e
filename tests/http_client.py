"""Client helpers of the tests of the ``tasks.httpserve`` servers (the feed
endpoint, the typeahead): one request, a raw exchange, and the check that
an error is one line of JSON without a traceback."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from tasks.httpserve import JsonServer


def request(server: JsonServer, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
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


def raw_exchange(server: JsonServer, data: bytes) -> bytes:
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


def assert_malformed_answered(server: JsonServer, data: bytes, status: bytes) -> None:
    """A malformed request gets its status and a one-line JSON error, then the server closes."""
    answer = raw_exchange(server, data)  # returns once the server closes the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == status, answer
    assert_error(body, json.loads(body))
