"""The feed read endpoint: ``GET /v1/feeds/<user_id>?limit=N&cursor=C``
answered from a ``FeedReader`` as one JSON object, and ``GET /healthz``.

Stdlib ``ThreadingHTTPServer``, like the dashboard: bound to 127.0.0.1
unless told otherwise, every socket read and write bounded by
``request_timeout_s``, at most ``max_connections`` handler threads (further
connections wait in the kernel's backlog). Every error is a one-line JSON
``{"error": "..."}``: 400 for a bad user id, limit or cursor, 404 for an
unknown path, 405 for a method other than GET, 503 when neither cluster
(or the app data) answers. Requests are logged without query strings;
bodies are never logged, tracebacks never sent.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tasks.appdata.errors import AppDataError
from tasks.appdata.ids import InvalidId, ObjectType, expect_type
from tasks.feeds.read import MAX_LIMIT, FeedPage, FeedReader, FeedUnavailable, check_page

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
DEFAULT_LIMIT = 50
_FEED_PATH = re.compile(r"/v1/feeds/([^/]+)")
_DIGITS = re.compile(r"[0-9]{1,20}")  # not int(): it takes "+1", " 1", "1_0" and other scripts' digits
_PARAMS = frozenset({"limit", "cursor"})
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def page_json(user_id: int, page: FeedPage) -> dict[str, Any]:
    """The endpoint's answer (``pinlater-feeds read --json`` prints it too).
    Ids also as strings: JavaScript numbers are exact only below 2**53."""
    return {
        "user_id": user_id,
        "user_id_str": str(user_id),
        "pins": [
            {"id": p.id, "id_str": str(p.id), "created_at_ms": p.created_at_ms, "data": p.data} for p in page.pins
        ],
        "next_cursor": page.next_cursor,
        "served_by": page.served_by,
    }


def parse_user_id(text: str) -> int:
    """A user id from a path or a command line; ValueError (one line) otherwise."""
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"user id must be a decimal number (up to 20 digits), got {text[:40]!r}")
    user_id = int(text)
    try:
        expect_type(user_id, ObjectType.USER)
    except InvalidId as exc:
        raise ValueError(f"not a user id: {exc}") from None
    return user_id


def one_line(text: str, limit: int = 500) -> str:
    return " ".join(text.split())[:limit]


class FeedServer(ThreadingHTTPServer):
    """Serves one ``FeedReader`` and closes it in ``server_close``."""

    daemon_threads = True

    def __init__(
        self,
        reader: FeedReader,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if max_connections < 1 or not request_timeout_s > 0:
            raise ValueError(f"need max_connections >= 1 and request_timeout_s > 0, got {max_connections}, "
                             f"{request_timeout_s}")
        self.reader = reader
        self.request_timeout_s = request_timeout_s
        self.loopback = _is_loopback(host)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the real port when bound to port 0)."""
        host, port = self.server_address[:2]
        return (bytes(host).decode() if isinstance(host, bytes | bytearray) else host), port

    def start(self) -> FeedServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="pinlater-feeds-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (when started), close the socket and the reader."""
        self._stopping.set()
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()

    def server_close(self) -> None:
        super().server_close()
        self.reader.close()

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

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:  # type: ignore[override]
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # reset, broken pipe, timeout: the client went away
            log.info("feeds connection from %s ended: %s", client_address[0], exc)
        else:
            log.exception("feeds connection from %s failed", client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: FeedServer
    connection: socket
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)  # every read and write of this connection

    def do_GET(self) -> None:  # noqa: N802
        if self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length", "0") != "0":
            # We never read bodies, so the next request's start is unknown: close.
            self._send(400, {"error": "GET takes no body"}, close=True)
            return
        status, answer = self._answer()
        self._send(status, answer)

    def _not_allowed(self) -> None:
        self._send(405, {"error": f"{self.command} is not supported: use GET"}, close=True)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed

    def _answer(self) -> tuple[int, dict[str, Any]]:
        try:
            parts = urlsplit(self.path)
            path = unquote(parts.path, errors="strict")
            pairs = parse_qsl(parts.query, keep_blank_values=True, errors="strict", max_num_fields=10)
        except ValueError as exc:  # UnicodeDecodeError is one
            reason = "bad percent-encoding (not UTF-8)" if isinstance(exc, UnicodeDecodeError) else str(exc)
            return 400, {"error": f"malformed URL: {one_line(reason, 100)}"}
        if not self._host_allowed():
            # A page elsewhere that rebinds its DNS name to 127.0.0.1 would
            # otherwise read feeds through a local browser.
            return 421, {"error": "Host header must name this server (localhost)"}
        if path == "/healthz":
            return 200, {"ok": True}
        match = _FEED_PATH.fullmatch(path)
        if match is None:
            return 404, {"error": f"no such path: {path[:100]}"}
        try:
            user_id, cursor, limit = _feed_request(match[1], pairs)
            check_page(cursor, limit)  # the caller's errors, before any ValueError could be ours
        except ValueError as exc:
            return 400, {"error": one_line(str(exc))}
        try:
            page = self.server.reader.read(user_id, cursor, limit)
        except (FeedUnavailable, AppDataError) as exc:
            what = "feed" if isinstance(exc, FeedUnavailable) else "app data"
            log.warning("feed of %d: %s unavailable: %s", user_id, what, one_line(str(exc)))
            return 503, {"error": f"{what} unavailable: {one_line(str(exc))}"}
        except Exception:
            log.exception("feed of %d failed", user_id)
            return 500, {"error": "internal error (see the server's log)"}
        return 200, page_json(user_id, page)

    def _host_allowed(self) -> bool:
        if not self.server.loopback:
            return True  # bound to a real interface: the operator chose who may reach it
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in ("", "localhost") or _is_loopback(host)

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
        self._send(code, {"error": one_line(message or HTTPStatus(code).phrase, 200)}, close=True)

    def _send(self, status: int, answer: dict[str, Any], close: bool = False) -> None:
        body = json.dumps(answer, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in _HEADERS.items():
            self.send_header(name, value)
        if status == 405:
            self.send_header("Allow", "GET")
        elif status == 503:
            self.send_header("Retry-After", "1")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # see log_request: no query strings (cursors) in logs

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # command and path are unset when the request line could not be parsed.
        path = (getattr(self, "path", None) or "").split("?", 1)[0]
        log.info("%s %s %s %s", self.client_address[0], getattr(self, "command", None) or "-", path[:200],
                 int(code) if isinstance(code, HTTPStatus) else code)


def _feed_request(user_text: str, pairs: list[tuple[str, str]]) -> tuple[int, str | None, int]:
    """User id, cursor and limit of a feed request; ValueError (one line) for a bad one."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in _PARAMS:
            raise ValueError(f"unknown parameter {name[:40]!r} (known: cursor, limit)")
        if name in params:
            raise ValueError(f"{name} given more than once")
        params[name] = value
    user_id = parse_user_id(user_text)
    limit = DEFAULT_LIMIT
    if "limit" in params:
        text = params["limit"]
        if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_LIMIT:
            raise ValueError(f"limit must be a whole number in 1..{MAX_LIMIT}, got {text[:40]!r}")
        limit = int(text)
    return user_id, params.get("cursor"), limit


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
