"""The one HTTP server of every small endpoint of the project (the
dashboard, the feed and typeahead endpoints, the Thrift server's metrics):
a stdlib ``HTTPServer`` with a thread per connection, which a few
operators, scrapers and callers need no more than, hardened against what a
hostile or broken client sends.

- Bound to 127.0.0.1 unless told otherwise; while bound to loopback, a Host
  header naming another server is refused (421), so a page elsewhere that
  rebinds its DNS name to 127.0.0.1 cannot read answers through a browser.
- What one client can hold (``pinlater.kit.httplimits``, the ``PINLATER_HTTP_*``
  settings): a request (line, headers, body; with TLS the handshake
  first) must arrive whole within ``request_timeout_s`` of its first byte
  however its bytes trickle, and each answer be taken within it; an idle
  keep-alive connection is closed after ``idle_timeout_s``. At most
  ``max_connections_per_client`` connections from one address, further
  ones closed at once; when all ``max_connections`` are open, a new one
  takes the slot of an idle or slow one (from the address holding the
  most), and is refused only when every connection is answering, or
  connected or began its request less than a second ago. The
  accept loop never waits for a slot. ``counters`` counts each refusal.
- A request line over 64 KiB, a header over 64 KiB, headers over 64 KiB in
  all or over 100 of them are refused; a body needs a Content-Length (no
  chunked bodies), a single one, at most the handler's ``max_body_bytes``
  (0: no bodies). A refused request closes its connection: where the next
  request would start is unknown.
- Every error, those the stdlib answers itself included, is one line
  (``error_answer``, or a handler's own ``error``); a handler's exception
  is logged with its traceback and answered 500 without it. Requests are
  logged without query strings; bodies and headers are never logged.

A server is an ``HttpServer`` given an ``HttpHandler`` subclass whose
``answer`` turns a parsed ``Request`` into an ``Answer``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import re
import ssl
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from socket import IPPROTO_TCP, TCP_NODELAY, socket
from typing import Any, ClassVar, Self, TypedDict
from urllib.parse import parse_qsl, unquote, urlsplit

from pinlater.kit.cli_output import one_line
from pinlater.kit.httplimits import (
    MAX_HEADER_BYTES,
    ConnectionTable,
    HttpConnection,
    HttpCounters,
    HttpLimits,
    RequestStream,
    http_limits,
)
from pinlater.observe.metrics import Family

log = logging.getLogger(__name__)
# A % that does not start an escape of two hex digits.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")

_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")  # not int(): it takes "+1", " 1", "1_0" and other scripts' digits
BASE_HEADERS: Mapping[str, str] = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


@dataclass(frozen=True, slots=True)
class Answer:
    """One response: status, body, its type, and headers of its own."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """A request that passed the checks: the path percent-decoded, the
    query's parameters in order, header names lower-cased."""

    method: str
    path: str
    pairs: list[tuple[str, str]]
    headers: Mapping[str, str]
    body: bytes
    remote: str


def json_answer(status: int, value: Any) -> Answer:
    """One line of compact JSON (no NaN: browsers' JSON.parse refuses it)."""
    return Answer(status, json.dumps(value, separators=(",", ":"), allow_nan=False).encode() + b"\n")


def error_answer(status: int, message: str) -> Answer:
    """``{"error": "<one line>"}``."""
    return json_answer(status, {"error": one_line(message, 500)})


def http_tls() -> ssl.SSLContext | None:
    """The HTTPS context of PINLATER_HTTP_TLS_CERT and _KEY, or None for
    plain HTTP: the dashboard's, the feed and typeahead endpoints' and the
    Thrift server's metrics endpoint's."""
    from pinlater.settings import Settings

    tls = Settings.from_env().http_tls
    return tls.context() if tls is not None else None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ServerOptions(TypedDict, total=False):
    """``HttpServer``'s tuning, passed on by its subclasses' constructors."""

    limits: HttpLimits
    request_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    max_connections_per_client: int
    tls: ssl.SSLContext | None


class HttpServer(HTTPServer):
    """A capped, timed-out HTTP server, a thread per connection; ``start``
    serves it in a daemon thread named after ``name``, ``stop`` stops it,
    closes its idle connections and its socket."""

    request_queue_size = 1024  # the listen backlog: a burst of connections is accepted, not dropped

    def __init__(
        self,
        name: str,
        handler: type[HttpHandler],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: HttpLimits | None = None,
        request_timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
        max_connections: int | None = None,
        max_connections_per_client: int | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``limits``: what a client may hold (default: the settings', see
        ``http_limits``); a limit given on its own replaces its field.
        ``tls``: serve HTTPS with this server context (see ``http_tls``);
        each handshake runs in its connection's thread, within the request timeout."""
        given: dict[str, Any] = {"request_timeout_s": request_timeout_s, "idle_timeout_s": idle_timeout_s,
                                 "max_connections": max_connections,
                                 "max_connections_per_client": max_connections_per_client}
        self.limits = dataclasses.replace(limits or http_limits(),
                                          **{key: value for key, value in given.items() if value is not None})
        self.name = name
        self.handler_class = handler
        self.tls = tls
        self.loopback = is_loopback(host)
        self.counters = HttpCounters(name)
        self.connections: ConnectionTable[HttpConnection] = ConnectionTable(name, self.limits, self.counters)
        self._thread: threading.Thread | None = None
        super().__init__((host, port), handler)

    @property
    def request_timeout_s(self) -> float:
        return self.limits.request_timeout_s

    def metric_families(self) -> list[Family]:
        """The counts of ``counters`` (``pinlater_http_*``)."""
        return self.counters.families()

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens (the real port when bound to port 0)."""
        host, port = self.server_address[:2]
        return (bytes(host).decode() if isinstance(host, bytes | bytearray) else host), port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"{'https' if self.tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.tls is not None:  # the handshake waits for the connection's own thread
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def start(self) -> Self:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self.serve_forever, name=f"pinlater-{self.name}-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (when started), close the connections not answering
        and the socket (``server_close``)."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
        self.connections.shed_all()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        # In the accept loop: admitted or closed at once, never waiting.
        conn = HttpConnection(request, str(client_address[0]), self.limits, self.counters)
        if not self.connections.admit(conn):
            self.shutdown_request(request)
            return
        thread = threading.Thread(target=self._serve_connection, args=(conn, client_address),
                                  name=f"pinlater-{self.name}-conn", daemon=True)
        try:
            thread.start()
        except BaseException:
            self.connections.forget(conn)
            raise

    def _serve_connection(self, conn: HttpConnection, client_address: Any) -> None:
        try:
            self.handler_class(conn.sock, client_address, self, conn)
        except Exception:  # noqa: BLE001 -- a connection's thread must end quietly; handle_error logs it
            if not conn.closing:  # shed: its read failed because we closed it
                self.handle_error(conn.sock, client_address)
        finally:
            self.connections.forget(conn)
            self.shutdown_request(conn.sock)

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # reset, broken pipe, timeout: the client went away
            log.info("%s connection from %s ended: %s", self.name, client_address[0], exc)
        else:
            log.exception("%s connection from %s failed", self.name, client_address[0])


class _Refused(Exception):
    """A request refused before it reaches ``answer``."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class HttpHandler(BaseHTTPRequestHandler):
    """Checks a request and hands it to ``answer``. A subclass sets the
    methods it takes, how large a body may be, and may add headers to every
    answer (a page's CSP) or give errors a shape of its own (``error``)."""

    server: HttpServer
    connection: socket
    rfile: RequestStream
    protocol_version = "HTTP/1.1"
    methods: ClassVar[frozenset[str]] = frozenset({"GET"})
    max_body_bytes: ClassVar[int] = 0
    max_query_fields: ClassVar[int] = 10
    headers_for_all: ClassVar[Mapping[str, str]] = BASE_HEADERS

    def __init__(self, request: socket, client_address: Any, server: HttpServer, conn: HttpConnection) -> None:
        self.conn = conn
        super().__init__(request, client_address, server)

    def answer(self, request: Request) -> Answer:
        raise NotImplementedError

    def error(self, status: int, message: str) -> Answer:
        """The answer of an error (``message`` is one line already)."""
        return error_answer(status, message)

    def version_string(self) -> str:
        return "pinlater"  # the Server header: no Python version for a scanner to match

    def setup(self) -> None:
        super().setup()
        # An answer goes out as two writes (the headers, then the body): with
        # Nagle's algorithm the body waits for the client's ACK of the
        # headers, which a kept-alive client delays by up to 40 ms.
        self.connection.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
        self.rfile.close()  # the stdlib's; reads go through the connection's deadline instead
        self.rfile = RequestStream(self.conn.reader)
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.settimeout(self.server.request_timeout_s)  # the whole handshake, however it trickles
            self.connection.do_handshake()

    def handle_one_request(self) -> None:
        self.conn.end_answer()
        self.conn.reader.between_requests()
        self.rfile.count_header_lines(None)
        # Waits (at most the idle timeout) for the request's first byte,
        # unless a pipelining client sent it already: its clock starts now.
        if not self.rfile.peek(1):
            self.close_connection = True
            return
        self.conn.reader.start_request()
        super().handle_one_request()

    def _serve(self) -> None:
        if self.command not in self.methods:
            self._not_allowed()
            return
        try:
            body = self._read_body()
        except _Refused as exc:
            self._send(self.error(exc.status, exc.message), close=True)
            return
        try:
            parts = urlsplit(self.path)
            if _BAD_ESCAPE.search(parts.path) or _BAD_ESCAPE.search(parts.query):
                # unquote would keep it as text: "%e" would mean "%e".
                raise ValueError("bad percent-encoding (a % not followed by two hex digits)")
            path = unquote(parts.path, errors="strict")
            pairs = parse_qsl(parts.query, keep_blank_values=True, errors="strict",
                              max_num_fields=self.max_query_fields)
        except ValueError as exc:  # UnicodeDecodeError is one
            reason = "bad percent-encoding (not UTF-8)" if isinstance(exc, UnicodeDecodeError) else str(exc)
            self._send(self.error(HTTPStatus.BAD_REQUEST, f"malformed URL: {one_line(reason, 100)}"))
            return
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:
            # Which one a proxy or a check reads differs: refused, as HTTP/1.1 says.
            self._send(self.error(HTTPStatus.BAD_REQUEST, f"{len(hosts)} Host headers: send one"))
            return
        if not self._host_allowed(hosts[0] if hosts else "", parts.netloc):
            self._send(self.error(HTTPStatus.MISDIRECTED_REQUEST, "Host header must name this server (localhost)"))
            return
        request = Request(self.command, path, pairs, {k.lower(): v for k, v in self.headers.items()}, body,
                          self.client_address[0])
        if not self.conn.begin_answer():  # shed as its last byte came in
            self.close_connection = True
            return
        try:
            answer = self.answer(request)
        except Exception:
            log.exception("%s: %s %s failed", self.server.name, self.command, path[:200])
            answer = self.error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see the server's log)")
        self._send(answer)

    # Every method reaches _serve, which refuses those not in ``methods``.
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve  # noqa: N815 -- http.server's

    def _not_allowed(self) -> None:
        allowed = ", ".join(sorted(self.methods))
        self._send(self.error(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not supported: use {allowed}"),
                   close=True)

    def _read_body(self) -> bytes:
        no_body = self.max_body_bytes == 0
        if self.headers.get("Transfer-Encoding") is not None:
            if no_body:
                raise _Refused(HTTPStatus.BAD_REQUEST, f"{self.command} takes no body")
            raise _Refused(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length (no Transfer-Encoding)")
        lengths = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not lengths:
            return b""
        if len(lengths) > 1:
            raise _Refused(HTTPStatus.BAD_REQUEST, "conflicting Content-Length headers")
        [text] = lengths
        if not _CONTENT_LENGTH.fullmatch(text):
            raise _Refused(HTTPStatus.BAD_REQUEST, f"Content-Length must be a number of bytes, got {text[:20]!r}")
        length = int(text)
        if length and no_body:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"{self.command} takes no body")
        if length > self.max_body_bytes:
            raise _Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {self.max_body_bytes} bytes")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise _Refused(HTTPStatus.REQUEST_TIMEOUT,
                           f"the body did not arrive within {self.server.request_timeout_s:g}s") from None
        if len(body) < length:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body ended after {len(body)} of {length} bytes")
        return body

    def _host_allowed(self, header: str, target_authority: str) -> bool:
        """The Host header, and the authority of a request target in
        absolute form (``GET http://host/``), which HTTP/1.1 puts first."""
        if not self.server.loopback:
            return True  # bound to a real interface: the operator chose who may reach it
        for named in (header, target_authority.rsplit("@", 1)[-1]):
            host = named.rsplit(":", 1)[0].strip("[]") if not named.endswith("]") else named.strip("[]")
            if host not in ("", "localhost") and not is_loopback(host):
                return False
        return True

    def parse_request(self) -> bool:
        self.rfile.count_header_lines(MAX_HEADER_BYTES)  # the request line is read: the headers come next
        if len(getattr(self, "raw_requestline", b"").split()) == 2:  # set by the stdlib, untyped
            # A request line without a version (HTTP/0.9): refused before the
            # stdlib waits for headers such a client never sends.
            self.command, self.request_version, self.close_connection = None, "HTTP/1.0", True  # type: ignore[assignment]
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported: end the request line with HTTP/1.1")
            return False
        return super().parse_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the stdlib answers itself (a broken request line, headers too
        long, a method it has no ``do_`` for): one line like every other
        error, then close."""
        if self.request_version == "HTTP/0.9":
            # The stdlib's default until parsed; an HTTP/0.9 answer has no status line.
            self.request_version = "HTTP/1.0"
        if code == HTTPStatus.NOT_IMPLEMENTED:  # an unknown method
            self._not_allowed()
            return
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        if status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE and message and explain:
            message = f"{message}: {explain}"  # which bound: a line, the count, or their total
        self._send(self.error(status, one_line(message or status.phrase, 200)), close=True)

    def _send(self, answer: Answer, close: bool = False) -> None:
        self.connection.settimeout(self.server.request_timeout_s)  # a client that does not read is cut off too
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for name, value in {**self.headers_for_all, **answer.headers}.items():
            self.send_header(name, value)
        if answer.status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", ", ".join(sorted(self.methods)))
        elif answer.status == HTTPStatus.SERVICE_UNAVAILABLE:
            self.send_header("Retry-After", "1")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # see log_request: no query strings (tokens, cursors, what people type) in logs

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # command and path are unset when the request line could not be parsed.
        path = (getattr(self, "path", None) or "").split("?", 1)[0]
        log.info("%s: %s %s %s %s", self.server.name, self.client_address[0], getattr(self, "command", None) or "-",
                 path[:200], int(code) if isinstance(code, HTTPStatus) else code)
