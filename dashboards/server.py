"""The dashboard's HTTP server: the page (static HTML, CSS, JS; no build
step, nothing fetched from anywhere else), the installed panels' parts of it
(``dashboards.panels``) and the API of ``dashboards.api``, on the project's
hardened server (``pinlater.kit.httpserver``: loopback by default, a deadline
per request, capped connections in all and per client address, one-line
errors, no query strings in the log; its counts are in ``/metrics``).

Errors are JSON ``{"error": {"code", "message"}}`` like the API's. Bodies
(of controls) are read up to ``MAX_REQUEST_BYTES``.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import ClassVar

from dashboards.api import MAX_POST_BYTES, Api, Request, Response, error_response
from dashboards.audit import AuditLog
from dashboards.panels import Panel, PanelFiles, Unavailable, load_panels, panel_files
from dashboards.progress import ProgressBoard
from dashboards.snapshot import Collector
from pinlater.kit.httplimits import HttpLimits
from pinlater.kit.httpserver import BASE_HEADERS, Answer, HttpHandler, HttpServer
from pinlater.kit.httpserver import Request as HttpRequest
from pinlater.observe import tracing
from pinlater.observe.seam import app_store_families
from pinlater.records import open_records
from pinlater.service import JobService
from pinlater.settings import Settings

# Bodies above a control's cap are refused (413) unread, before the token
# is looked at: a stranger's request costs no more than a control's.
MAX_REQUEST_BYTES = MAX_POST_BYTES
# Where index.html takes the panels' links and sections.
HEAD_MARK = "<!-- panel styles and scripts -->"
SECTIONS_MARK = "<!-- panel sections -->"

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/controls.js": ("controls.js", "text/javascript; charset=utf-8"),
    "/static/charts.js": ("charts.js", "text/javascript; charset=utf-8"),
}
# The page may talk to this server only; the Flower link is a navigation,
# which this policy does not restrict.
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
# The API's error codes for what the server refuses itself; others are the status's name.
_CODES = {HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "TOO_LARGE", HTTPStatus.MISDIRECTED_REQUEST: "BAD_HOST"}


def load_static(files: PanelFiles) -> dict[str, tuple[bytes, str]]:
    """The page and its files, with the panels' put into the page."""
    # Beside this module (a plain path: the editable install makes the
    # top-level package a namespace that importlib.resources cannot read).
    static = Path(__file__).with_name("static")
    out = {path: ((static / name).read_bytes(), ctype) for path, (name, ctype) in _STATIC.items()}
    page, ctype = out["/"]
    html = page.decode("utf-8")
    if HEAD_MARK not in html or SECTIONS_MARK not in html:
        raise ValueError(f"{static / 'index.html'} lacks {HEAD_MARK} or {SECTIONS_MARK}")
    html = html.replace(HEAD_MARK, files.head).replace(SECTIONS_MARK, files.sections)
    out["/"] = (html.encode("utf-8"), ctype)
    return {**files.static, **out}


class DashboardServer(HttpServer):
    def __init__(self, api: Api, static: dict[str, tuple[bytes, str]], host: str, port: int,
                 limits: HttpLimits, tls: ssl.SSLContext | None = None) -> None:
        self.api = api
        self.static = static
        super().__init__("dashboard", _Handler, host, port, limits=limits, tls=tls)


class _Handler(HttpHandler):
    server: DashboardServer
    methods = frozenset({"GET", "HEAD", "POST"})
    max_body_bytes = MAX_REQUEST_BYTES
    max_query_fields = 100
    headers_for_all: ClassVar[Mapping[str, str]] = {**BASE_HEADERS, **_SECURITY_HEADERS}

    def error(self, status: int, message: str) -> Answer:
        return _answer(error_response(status, _CODES.get(HTTPStatus(status)) or HTTPStatus(status).name, message))

    def answer(self, request: HttpRequest) -> Answer:
        if request.method == "HEAD":  # a GET's answer, whose body the kit leaves out (health checks use it)
            request = dataclasses.replace(request, method="GET")
        if request.method == "GET" and request.path in self.server.static:
            content, ctype = self.server.static[request.path]
            return Answer(200, content, ctype, {"Cache-Control": "no-cache"})
        if request.method == "GET" and request.path == "/healthz":
            return Answer(200, b"ok\n", "text/plain")
        if request.method == "GET" and request.path == "/favicon.ico":
            return Answer(204, b"", "text/plain")
        return _answer(self.server.api.handle(Request(
            method=request.method,
            path=request.path,
            query=dict(request.pairs),
            headers=request.headers,
            body=request.body,
            remote=request.remote,
        )))


def _answer(response: Response) -> Answer:
    return Answer(response.status, response.body, response.content_type, response.headers)


class Dashboard:
    """The whole dashboard: its own job service client, the snapshot
    collector, the records, the panels and the HTTP server. ``start()``
    serves in a thread; ``close()`` stops everything.

    ``panels`` are the panels to show, each started and closed with the
    dashboard; by default the installed ones (``dashboards.panels``)."""

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
        request_timeout_s: float | None = None,
        panels: Sequence[Panel] | None = None,
    ) -> None:
        """``request_timeout_s``: instead of PINLATER_HTTP_REQUEST_TIMEOUT_S
        (the HTTP limits are ``settings``'s)."""
        if settings.dashboard_protect_reads and settings.dashboard_token_sha256 is None:
            raise ValueError("PINLATER_DASHBOARD_PROTECT_READS needs PINLATER_DASHBOARD_TOKEN")
        self.service = service
        self._owns_service = owns_service
        self.collector = Collector(service.operators, ttl_s=refresh_s, rate_window_minutes=rate_window_minutes)
        self.records = open_records(settings.resolved_control_url, settings.socket_timeout_s)
        unavailable: list[Unavailable] = []
        if panels is None:
            panels, unavailable = load_panels(interval_s=refresh_s)
        self.panels = list(panels)
        try:
            self.api = Api(service, settings, self.collector, AuditLog(self.records), ProgressBoard(self.records),
                           self.panels, unavailable_panels=unavailable, refresh_ms=int(refresh_s * 1000))
            self.http = DashboardServer(
                self.api,
                load_static(panel_files(self.panels)),
                settings.dashboard_host if host is None else host,
                settings.dashboard_port if port is None else port,
                settings.http_limits if request_timeout_s is None
                else dataclasses.replace(settings.http_limits, request_timeout_s=request_timeout_s),
                settings.http_tls.context() if settings.http_tls is not None else None,
            )
            self.api.registry.register(app_store_families)
            self.api.registry.register(self.http.metric_families)
            tracing.observe_metrics(self.api.registry.collect)  # its first reading names the families: the server's too
        except BaseException:  # e.g. the port is taken: release what was opened
            self._close_parts()
            raise

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
        return self.http.url

    def start(self) -> Dashboard:
        for panel in self.panels:
            panel.start()
        self.http.start()
        return self

    def close(self) -> None:
        self.http.stop()
        self._close_parts()
        if self._owns_service:
            self.service.close()

    def _close_parts(self) -> None:
        for panel in self.panels:
            panel.close()
        self.collector.close()
        self.records.close()
