"""What the task packages' small GET-only JSON servers share (the feed
endpoint, the typeahead): a stdlib ``ThreadingHTTPServer`` bound to
127.0.0.1 unless told otherwise, every socket read and write bounded by
``request_timeout_s``, at most ``max_connections`` handler threads (further
connections wait in the kernel's backlog), a Host-header check against DNS
rebinding (421), and every error a one-line JSON ``{"error": "..."}``.
Requests are logged without query strings; tracebacks are never sent.

A server subclasses ``JsonServer`` and gives it a ``JsonHandler`` subclass
whose ``route`` answers a decoded path and its query parameters.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any, ClassVar, Self, TypedDict
from urllib.parse import parse_qsl, unquote, urlsplit

from tasks.appdata.ids import InvalidId, ObjectType, expect_type

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
DIGITS = re.compile(r"[0-9]{1,20}")  # not int(): it takes "+1", " 1", "1_0" and other scripts' digits
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


@dataclass(frozen=True, slots=True)
class Answer:
    """One response: status, body, its type, and headers of its own."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_answer(status: int, value: Any) -> Answer:
    """One line of compact JSON (no NaN: browsers' JSON.parse refuses it)."""
    return Answer(status, json.dumps(value, separators=(",", ":"), allow_nan=False).encode() + b"\n")


def error_answer(status: int, message: str) -> Answer:
    return json_answer(status, {"error": one_line(message)})


def one_line(text: str, limit: int = 500) -> str:
    return " ".join(text.split())[:limit]


def parse_user_id(text: str) -> int:
    """A user id from a path or a command line; ValueError (one line) otherwise."""
    if not DIGITS.fullmatch(text):
        raise ValueError(f"user id must be a decimal number (up to 20 digits), got {text[:40]!r}")
    user_id = int(text)
    try:
        expect_type(user_id, ObjectType.USER)
    except InvalidId as exc:
        raise ValueError(f"not a user id: {exc}") from None
    return user_id


def parse_count(name: str, text: str, high: int) -> int:
    """A whole number in 1..high given as a query parameter; ValueError otherwise."""
    if not DIGITS.fullmatch(text) or not 1 <= int(text) <= high:
        raise ValueError(f"{name} must be a whole number in 1..{high}, got {text[:40]!r}")
    return int(text)


def unique_params(pairs: list[tuple[str, str]], known: frozenset[str]) -> dict[str, str]:
    """Query parameters by name: each known, none repeated; ValueError otherwise."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in known:
            raise ValueError(f"unknown parameter {name[:40]!r} (known: {', '.join(sorted(known))})")
        if name in params:
            raise ValueError(f"{name} given more than once")
        params[name] = value
    return params


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ServerOptions(TypedDict, total=False):
    """``JsonServer``'s tuning, passed on by its subclasses' constructors."""

    request_timeout_s: float
    max_connections: int


class JsonServer(ThreadingHTTPServer):
    """A capped, timed-out ``ThreadingHTTPServer``; ``start`` serves it in a
    daemon thread named ``name``, ``stop`` stops it and closes the socket."""

    daemon_threads = True

    def __init__(
        self,
        name: str,
        handler: type[JsonHandler],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if max_connections < 1 or not request_timeout_s > 0:
            raise ValueError(f"need max_connections >= 1 and request_timeout_s > 0, got {max_connections}, "
                             f"{request_timeout_s}")
        self.name = name
        self.request_timeout_s = request_timeout_s
        self.loopback = is_loopback(host)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        super().__init__((host, port), handler)

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the real port when bound to port 0)."""
        host, port = self.server_address[:2]
        return (bytes(host).decode() if isinstance(host, bytes | bytearray) else host), port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> Self:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name=f"pinlater-{self.name}-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (when started) and close the socket (``server_close``)."""
        self._stopping.set()
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        # The thread cap: wait for a slot, but notice a stop meanwhile.
        while not self._slots.acquire(timeout=0.2):
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # reset, broken pipe, timeout: the client went away
            log.info("%s connection from %s ended: %s", self.name, client_address[0], exc)
        else:
            log.exception("%s connection from %s failed", self.name, client_address[0])


class JsonHandler(BaseHTTPRequestHandler):
    """GET only; a subclass answers in ``route``. ``/healthz`` is answered here."""

    server: JsonServer
    connection: socket
    protocol_version = "HTTP/1.1"
    headers_for_all: ClassVar[Mapping[str, str]] = _HEADERS  # a subclass may add its own (a page's CSP)

    def route(self, path: str, pairs: list[tuple[str, str]]) -> Answer:
        raise NotImplementedError

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)  # every read and write of this connection

    def do_GET(self) -> None:
        if self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length", "0") != "0":
            # We never read bodies, so the next request's start is unknown: close.
            self._send(error_answer(400, "GET takes no body"), close=True)
            return
        self._send(self._answer())

    def _not_allowed(self) -> None:
        self._send(error_answer(405, f"{self.command} is not supported: use GET"), close=True)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed  # noqa: N815 -- http.server's names

    def _answer(self) -> Answer:
        try:
            parts = urlsplit(self.path)
            path = unquote(parts.path, errors="strict")
            pairs = parse_qsl(parts.query, keep_blank_values=True, errors="strict", max_num_fields=10)
        except ValueError as exc:  # UnicodeDecodeError is one
            reason = "bad percent-encoding (not UTF-8)" if isinstance(exc, UnicodeDecodeError) else str(exc)
            return error_answer(400, f"malformed URL: {one_line(reason, 100)}")
        if not self._host_allowed():
            # A page elsewhere that rebinds its DNS name to 127.0.0.1 would
            # otherwise read answers through a local browser.
            return error_answer(421, "Host header must name this server (localhost)")
        if path == "/healthz":
            return json_answer(200, {"ok": True})
        return self.route(path, pairs)

    def _host_allowed(self) -> bool:
        if not self.server.loopback:
            return True  # bound to a real interface: the operator chose who may reach it
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in ("", "localhost") or is_loopback(host)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # a request line without a version: no status line to answer with
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported: end the request line with HTTP/1.1")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the stdlib answers itself (a broken request line, headers too
        long, an unknown method): one-line JSON like every other error, then close."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # an HTTP/0.9 answer has no status line
        if code == HTTPStatus.NOT_IMPLEMENTED:  # the stdlib's answer to a method it has no do_ for
            self._not_allowed()
            return
        self._send(error_answer(code, one_line(message or HTTPStatus(code).phrase, 200)), close=True)

    def _send(self, answer: Answer, close: bool = False) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for name, value in {**self.headers_for_all, **answer.headers}.items():
            self.send_header(name, value)
        if answer.status == 405:
            self.send_header("Allow", "GET")
        elif answer.status == 503:
            self.send_header("Retry-After", "1")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # see log_request: no query strings (cursors, what people type) in logs

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # command and path are unset when the request line could not be parsed.
        path = (getattr(self, "path", None) or "").split("?", 1)[0]
        log.info("%s %s %s %s", self.client_address[0], getattr(self, "command", None) or "-", path[:200],
                 int(code) if isinstance(code, HTTPStatus) else code)
