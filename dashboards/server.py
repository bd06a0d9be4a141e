"""The dashboard's HTTP server: the page (static HTML, CSS, JS; no build
step, nothing fetched from anywhere else) and the API of ``dashboards.api``.

Stdlib ``ThreadingHTTPServer``: a few operators and a scraper need nothing
more, and it adds no dependency. Binds 127.0.0.1 unless told otherwise.
Requests are logged without query strings, and bodies are never logged.

Malformed HTTP (a Content-Length that is not a number, a body over
``MAX_REQUEST_BYTES`` or shorter than announced, chunked bodies, bad
percent-encoding, a broken request line) is answered with a 4xx and a
one-line JSON error, like every other error, and the connection is closed;
it is not a traceback in the log. Every socket read and write waits at most
``request_timeout_s``, so a client that stops sending ties up one thread
for that long, not forever.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from dashboards.api import Api, Request, Response, error_response
from dashboards.audit import AuditLog
from dashboards.backfill_panel import BackfillBoard
from dashboards.hbase_health import HBaseHealth
from dashboards.progress import ProgressBoard
from dashboards.records import open_records
from dashboards.snapshot import Collector
from pinlater.service import JobService
from pinlater.settings import Settings
from tasks.appdata.settings import AppDataSettings
from tasks.hbase import HBaseSettings
from tasks.httpserve import is_loopback

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024  # bodies above are refused (413) unread; controls take far less
REQUEST_TIMEOUT_S = 10.0
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/controls.js": ("controls.js", "text/javascript; charset=utf-8"),
    "/static/hbase.js": ("hbase.js", "text/javascript; charset=utf-8"),
    "/static/charts.js": ("charts.js", "text/javascript; charset=utf-8"),
    "/static/backfills.js": ("backfills.js", "text/javascript; charset=utf-8"),
}
# The page may talk to this server only; the Flower link is a navigation,
# which this policy does not restrict.
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def _load_static() -> dict[str, tuple[bytes, str]]:
    # Beside this module (a plain path: the editable install makes the
    # top-level package a namespace that importlib.resources cannot read).
    static = Path(__file__).with_name("static")
    return {path: ((static / name).read_bytes(), ctype) for path, (name, ctype) in _STATIC.items()}


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: Api, host: str, port: int, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.api = api
        self.static = _load_static()
        self.loopback = is_loopback(host)
        self.request_timeout_s = request_timeout_s
        super().__init__((host, port), _Handler)

    def handle_error(self, request: object, client_address: tuple[str, int]) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            # Reset, broken pipe, timeout: the client went away. Not our bug.
            log.info("dashboard connection from %s ended: %s", client_address[0], exc)
        else:
            log.exception("dashboard connection from %s failed", client_address[0])


class _Refused(Exception):
    """A request refused before it reaches the API."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)  # every read and write of this connection

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_HEAD(self) -> None:
        self._send(error_response(405, "METHOD_NOT_ALLOWED", "HEAD is not supported"))

    def _serve(self, method: str) -> None:
        try:
            body = self._read_body()
        except _Refused as exc:
            # Where the next request would start is unknown: close.
            code = "TOO_LARGE" if exc.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE else exc.status.name  # as the API's
            self._send(error_response(exc.status, code, exc.message), close=True)
            return
        try:
            parts = urlsplit(self.path)
            path = unquote(parts.path, errors="strict")
            query = dict(parse_qsl(parts.query, keep_blank_values=True, errors="strict", max_num_fields=100))
        except ValueError as exc:  # UnicodeDecodeError is one
            reason = "bad percent-encoding (not UTF-8)" if isinstance(exc, UnicodeDecodeError) else str(exc)[:100]
            self._send(error_response(400, "BAD_REQUEST", f"malformed URL: {reason}"))
            return
        if not self._host_allowed():
            # A page on another site that rebinds its DNS name to 127.0.0.1
            # would otherwise read the open views through the victim's browser.
            self._send(error_response(421, "BAD_HOST", "Host header must name this server (localhost)"))
            return
        if method == "GET" and path in self.server.static:
            content, ctype = self.server.static[path]
            self._send(Response(200, content, ctype, {"Cache-Control": "no-cache"}))
            return
        if method == "GET" and path in ("/healthz", "/favicon.ico"):
            self._send(Response(200, b"ok\n", "text/plain") if path == "/healthz" else Response(204, b""))
            return
        request = Request(
            method=method,
            path=path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            remote=self.client_address[0],
        )
        try:
            response = self.server.api.handle(request)
        except Exception:
            log.exception("dashboard request %s %s failed", method, path)
            response = error_response(500, "INTERNAL", "internal error (see the dashboard's log)")
        response.headers.setdefault("Cache-Control", "no-store")
        self._send(response)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding") is not None:
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
        if length > MAX_REQUEST_BYTES:
            raise _Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_REQUEST_BYTES} bytes")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise _Refused(HTTPStatus.REQUEST_TIMEOUT,
                           f"the body did not arrive within {self.server.request_timeout_s:g}s") from None
        if len(body) < length:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body ended after {len(body)} of {length} bytes")
        return body

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":  # a request line without a version
            self.send_error(HTTPStatus.BAD_REQUEST, "HTTP/0.9 is not supported: end the request line with HTTP/1.1")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the stdlib answers itself (a broken request line, headers too
        long, an unknown method): JSON like every other error, then close."""
        if self.request_version == "HTTP/0.9":
            # The stdlib's default until the request line is parsed; an HTTP/0.9
            # answer would have no status line at all.
            self.request_version = "HTTP/1.0"
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        self._send(error_response(status.value, status.name, message or status.phrase), close=True)

    def _host_allowed(self) -> bool:
        if not self.server.loopback:
            return True  # bound to a real interface: the operator chose who may reach it
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in ("localhost", "") or is_loopback(host)

    def _send(self, response: Response, close: bool = False) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in {**_SECURITY_HEADERS, **response.headers}.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # replaced by log_request below: no query strings in logs

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # command and path are unset when the request line could not be parsed.
        path = (getattr(self, "path", None) or "").split("?", 1)[0]
        log.info("%s %s %s %s", self.client_address[0], getattr(self, "command", None) or "-", path[:200],
                 int(code) if isinstance(code, HTTPStatus) else code)


class Dashboard:
    """The whole dashboard: its own job service client, the snapshot
    collector, the records, the HBase probes and the HTTP server.
    ``start()`` serves in a thread; ``close()`` stops everything.

    ``hbase`` says where the feed tasks' clusters are; by default
    ``HBaseSettings.from_env()``, and settings it cannot read leave the
    HBase panel saying why instead of stopping the dashboard. ``appdata``
    says where the backfill runs are recorded (by default
    ``AppDataSettings.from_env()``, likewise)."""

    def __init__(
        self,
        service: JobService,
        settings: Settings,
        *,
        host: str | None = None,
        port: int | None = None,
        refresh_s: float = 2.0,
        rate_window_minutes: int = 5,
        owns_service: bool = False,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        hbase: HBaseSettings | None = None,
        appdata: AppDataSettings | None = None,
    ) -> None:
        if settings.dashboard_protect_reads and settings.dashboard_token_sha256 is None:
            raise ValueError("PINLATER_DASHBOARD_PROTECT_READS needs PINLATER_DASHBOARD_TOKEN")
        self.service = service
        self._owns_service = owns_service
        self.collector = Collector(service, ttl_s=refresh_s, rate_window_minutes=rate_window_minutes)
        self.records = open_records(settings.resolved_control_url, settings.socket_timeout_s)
        self.hbase = (HBaseHealth.from_env(interval_s=refresh_s) if hbase is None
                      else HBaseHealth(hbase, interval_s=refresh_s))
        self.backfills = (BackfillBoard.from_env(interval_s=refresh_s) if appdata is None
                          else BackfillBoard(appdata, interval_s=refresh_s))
        self.api = Api(service, settings, self.collector, AuditLog(self.records), ProgressBoard(self.records),
                       self.hbase, self.backfills, refresh_ms=int(refresh_s * 1000))
        try:
            self.http = DashboardServer(
                self.api,
                settings.dashboard_host if host is None else host,
                settings.dashboard_port if port is None else port,
                request_timeout_s,
            )
        except BaseException:  # e.g. the port is taken: release what was opened
            self.hbase.close()
            self.backfills.close()
            self.collector.close()
            self.records.close()
            raise
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: object) -> Dashboard:
        service = JobService.from_settings(settings, source="pinlater-dashboard")
        try:
            return cls(service, settings, owns_service=True, **kwargs)  # type: ignore[arg-type]
        except BaseException:
            service.close()
            raise

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> Dashboard:
        self.hbase.start()
        self.backfills.start()
        self._thread = threading.Thread(target=self.http.serve_forever, name="pinlater-dashboard", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.http.shutdown()
            self._thread.join(timeout=5)
        self.http.server_close()
        self.hbase.close()
        self.backfills.close()
        self.collector.close()
        self.records.close()
        if self._owns_service:
            self.service.close()
