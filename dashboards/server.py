"""The dashboard's HTTP server: the page (static HTML, CSS, JS; no build
step, nothing fetched from anywhere else) and the API of ``dashboards.api``.

Stdlib ``ThreadingHTTPServer``: a few operators and a scraper need nothing
more, and it adds no dependency. Binds 127.0.0.1 unless told otherwise.
Requests are logged without query strings, and bodies are never logged.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from dashboards.api import Api, Request, Response, error_response
from dashboards.audit import AuditLog
from dashboards.progress import ProgressBoard
from dashboards.records import open_records
from dashboards.snapshot import Collector
from pinlater.service import JobService
from pinlater.settings import Settings

log = logging.getLogger(__name__)

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/controls.js": ("controls.js", "text/javascript; charset=utf-8"),
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


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: Api, host: str, port: int) -> None:
        self.api = api
        self.static = _load_static()
        self.loopback = _is_loopback(host)
        super().__init__((host, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._send(error_response(405, "METHOD_NOT_ALLOWED", "HEAD is not supported"))

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1024 * 1024:
            self._send(error_response(413, "TOO_LARGE", "request body too large"), close=True)
            return
        body = self.rfile.read(length) if length > 0 else b""
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
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
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

    def _host_allowed(self) -> bool:
        if not self.server.loopback:
            return True  # bound to a real interface: the operator chose who may reach it
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in ("localhost", "") or _is_loopback(host)

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
        log.info("%s %s %s %s", self.client_address[0], self.command, urlsplit(self.path).path, code)


class Dashboard:
    """The whole dashboard: its own job service client, the snapshot
    collector, the records and the HTTP server. ``start()`` serves in a
    thread; ``close()`` stops everything."""

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
    ) -> None:
        if settings.dashboard_protect_reads and settings.dashboard_token_sha256 is None:
            raise ValueError("PINLATER_DASHBOARD_PROTECT_READS needs PINLATER_DASHBOARD_TOKEN")
        self.service = service
        self._owns_service = owns_service
        self.collector = Collector(service, ttl_s=refresh_s, rate_window_minutes=rate_window_minutes)
        self.records = open_records(settings.resolved_control_url, settings.socket_timeout_s)
        self.api = Api(service, settings, self.collector, AuditLog(self.records), ProgressBoard(self.records),
                       refresh_ms=int(refresh_s * 1000))
        try:
            self.http = DashboardServer(
                self.api,
                settings.dashboard_host if host is None else host,
                settings.dashboard_port if port is None else port,
            )
        except BaseException:  # e.g. the port is taken: release what was opened
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
        self._thread = threading.Thread(target=self.http.serve_forever, name="pinlater-dashboard", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.http.shutdown()
            self._thread.join(timeout=5)
        self.http.server_close()
        self.collector.close()
        self.records.close()
        if self._owns_service:
            self.service.close()
