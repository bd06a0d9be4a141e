"""The dashboard's JSON API and /metrics, independent of the HTTP server.

Reads (GET):
  /api/config                      what the page needs to start (always open; the
                                   Flower link only with the operator token)
  /api/overview                    the snapshot (see dashboards.snapshot)
  /api/shards                      its shards part
  /api/queues/{queue}              one queue from the snapshot, with its config
  /api/jobs?queue=&state=&priority=&future=&limit=&continuation=
                                   one page of a scan, newest first, no bodies
  /api/job?descriptor=&body=1      one job; its body only when asked, capped
  /api/audit?limit=                operator actions, newest first
  /api/progress                    long operations (see dashboards.progress), and
                                   the batches that changed last
  /api/rates?minutes=&limit=       per-minute rates of the busiest queues (see dashboards.rates)
  /metrics                         Prometheus text
  and each installed panel's routes (see dashboards.panels)
Controls (POST, JSON object body, token and operator headers):
  /api/queues/{queue}/{rate|pause|resume|retry-failed|delete-jobs}

Authentication: the operator token travels in a header, ``X-PinLater-Token``
or ``Authorization: Bearer``, never in a cookie, so another site cannot make
a browser send it (no CSRF), and controls must also be JSON, which a plain
HTML form cannot send. Controls are refused while no token is configured.
Read views need the token only with ``dashboard_protect_reads``.

Every answer is strict JSON (RFC 8259), which a browser's ``JSON.parse``
accepts: NaN and the infinities, which Python's json module would write as
bare tokens, are sent as null whatever the stores hold.
"""

from __future__ import annotations

import hmac
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dashboards.audit import AuditLog
from dashboards.controls import Caller, Controls
from dashboards.coverage import covered
from dashboards.metrics import families
from dashboards.panels import Panel, Unavailable, View, check_routes
from dashboards.progress import ProgressBoard
from dashboards.rates import DEFAULT_QUEUES, MAX_MINUTES, MAX_QUEUES, RateCharts
from dashboards.snapshot import Collector
from pinlater.errors import (
    ConfigUnreadable,
    ErrorCode,
    InvalidRequest,
    NoHealthyShards,
    PasswordInvalid,
    PinLaterError,
    QueueNotFound,
    ShardConnectionFailed,
)
from pinlater.kit.secret_throttle import SecretThrottle
from pinlater.kit.urls import redact
from pinlater.models import CONTINUATION_START, BatchStatus, JobInfo
from pinlater.observe.metrics import Family, Registry
from pinlater.service import JobService
from pinlater.settings import Settings, hash_secret
from pinlater.states import JobState
from pinlater.validation import MAX_LIMIT

MAX_POST_BYTES = 64 * 1024
DEFAULT_BODY_CAP = 4096
_CONTROL = re.compile(r"/api/queues/([^/]+)/([a-z-]+)")
_QUEUE = re.compile(r"/api/queues/([^/]+)")
_DECIMAL = re.compile(r"-?[0-9]{1,18}")


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""
    remote: str = ""


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def finite_json(data: object) -> object:
    """``data`` with every NaN and infinity replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    return data


def json_response(status: int, data: object) -> Response:
    return Response(status, json.dumps(finite_json(data), default=str, allow_nan=False).encode())


def error_response(status: int, code: str, message: str) -> Response:
    return json_response(status, {"error": {"code": code, "message": message}})


def _status_for(exc: PinLaterError) -> int:
    if isinstance(exc, QueueNotFound):
        return 404
    if isinstance(exc, ConfigUnreadable):
        return 409
    if isinstance(exc, NoHealthyShards | ShardConnectionFailed):
        return 503
    if exc.code is ErrorCode.UNKNOWN and not isinstance(exc, InvalidRequest):
        return 500
    return 400


class Api:
    def __init__(
        self,
        service: JobService,
        settings: Settings,
        collector: Collector,
        audit: AuditLog,
        progress: ProgressBoard,
        panels: Sequence[Panel] = (),
        *,
        unavailable_panels: Sequence[Unavailable] = (),
        body_cap: int = DEFAULT_BODY_CAP,
        refresh_ms: int = 2000,
    ) -> None:
        self.service, self.settings, self.collector = service, settings, collector
        self.audit, self.progress, self.panels = audit, progress, list(panels)
        self.unavailable_panels = list(unavailable_panels)
        self.controls = Controls(service, audit, collector.invalidate)
        # The charts show the queues of the snapshot, which the page reads anyway.
        self.rates = RateCharts(service.operators.minute_series,
                                lambda: [q["name"] for q in collector.snapshot()["queues"]], ttl_s=collector.ttl_s)
        self.body_cap = body_cap
        self.refresh_ms = refresh_ms
        # The operator token is guessed no faster than the admin secret: per
        # client address and per process (pinlater.kit.secret_throttle).
        self._token_throttle = SecretThrottle(
            settings.admin_secret_max_failures, settings.admin_secret_max_failures_all,
            settings.admin_secret_window_s, what="operator token",
        )
        # Further Prometheus text for /metrics: the HTTP server's own counts.
        self.registry = Registry(self._metric_families)
        self._gets: dict[str, Callable[[Request], Response]] = {
            "/api/config": lambda r: json_response(200, self.config(r)),
            "/api/overview": lambda r: json_response(200, self.collector.snapshot()),
            "/api/shards": lambda r: json_response(200, self._shards()),
            "/api/jobs": self._jobs,
            "/api/job": self._job,
            "/api/audit": self._audit,
            "/api/progress": lambda r: json_response(200, {"operations": self._operations()}),
            "/api/rates": self._rates,
            "/metrics": self._metrics,
        }
        check_routes(self.panels, self._gets, reserved_prefix="/api/queues/")
        for panel in self.panels:
            for path, view in panel.routes.items():
                self._gets[path] = self._panel_view(view)

    @property
    def controls_enabled(self) -> bool:
        return self.settings.dashboard_token_sha256 is not None

    def config(self, req: Request) -> dict[str, Any]:
        """What the page needs to start. Anyone may read it (the page asks
        for the token from it), so Flower's address, which leads to every
        task's arguments and to remote control of the workers, goes only to
        a caller with the operator token; null otherwise."""
        signed_in = self._token_problem(req) is None
        return {
            # A password in the setting is not shown even then.
            "flower_url": redact(self.settings.flower_url) if signed_in else None,
            "controls_enabled": self.controls_enabled,
            "reads_protected": self.settings.dashboard_protect_reads,
            "refresh_ms": self.refresh_ms,
            "body_cap_bytes": self.body_cap,
            "shards": self.service.operators.shard_ids(),
            "panels": [p.name for p in self.panels],
            "unavailable_panels": [{"name": u.name, "error": u.error} for u in self.unavailable_panels],
        }

    def _panel_view(self, view: View) -> Callable[[Request], Response]:
        return lambda r: json_response(200, view(self.collector.snapshot()))

    # -- dispatch ---------------------------------------------------------------
    def handle(self, req: Request) -> Response:
        try:
            return self._dispatch(req)
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message)
        except PinLaterError as exc:
            code = ("INVALID_REQUEST" if isinstance(exc, InvalidRequest)
                    else "CONFIG_UNREADABLE" if isinstance(exc, ConfigUnreadable) else exc.code.name)
            return error_response(_status_for(exc), code, exc.message)

    def _dispatch(self, req: Request) -> Response:
        if req.method == "GET":
            handler = self._gets.get(req.path)
            queue_match = _QUEUE.fullmatch(req.path)
            if handler is None and queue_match is None:
                raise ApiError(404, "NOT_FOUND", f"no such view: {req.path}")
            if req.path != "/api/config" and self.settings.dashboard_protect_reads:
                self._require_token(req)
            if handler is not None:
                return handler(req)
            assert queue_match is not None
            return json_response(200, self._queue(queue_match.group(1)))
        if req.method == "POST":
            match = _CONTROL.fullmatch(req.path)
            if match is None:
                raise ApiError(404, "NOT_FOUND", f"no such control: {req.path}")
            return self._control(req, match.group(1), match.group(2))
        raise ApiError(405, "METHOD_NOT_ALLOWED", f"{req.method} is not supported")

    def _require_token(self, req: Request) -> None:
        problem = self._token_problem(req)
        if problem is not None:
            raise problem

    def _token_problem(self, req: Request) -> ApiError | None:
        """None if ``req`` carries the operator token, else why not."""
        expected = self.settings.dashboard_token_sha256
        if expected is None:
            return ApiError(403, "CONTROLS_DISABLED",
                            "no operator token is configured (PINLATER_DASHBOARD_TOKEN): controls are disabled")
        auth = req.headers.get("authorization", "")
        token = req.headers.get("x-pinlater-token") or (auth[7:] if auth.lower().startswith("bearer ") else "")
        if not token:
            return ApiError(401, "TOKEN_REQUIRED", "the operator token is required (X-PinLater-Token header)")
        try:
            self._token_throttle.check(req.remote)
        except PasswordInvalid as exc:
            return ApiError(429, "TOO_MANY_WRONG_TOKENS", exc.message)
        if not hmac.compare_digest(hash_secret(token), expected):
            self._token_throttle.failed(req.remote)
            return ApiError(403, "TOKEN_INVALID", "wrong operator token")
        self._token_throttle.succeeded(req.remote)
        return None

    # -- reads -------------------------------------------------------------------
    def _shards(self) -> dict[str, Any]:
        snap = self.collector.snapshot()
        return {k: snap[k] for k in ("taken_at_ms", "partial", "shards_down", "shards")}

    def _queue(self, name: str) -> dict[str, Any]:
        try:
            stored: Any = json.loads(self.service.queue_config(name, fresh=True).to_json())
        except ConfigUnreadable:
            stored = None  # the snapshot's config_error says why
        for q in self.collector.snapshot()["queues"]:
            if q["name"] == name:
                return {**q, "config": stored}
        # Created after the cached snapshot was taken.
        self.collector.invalidate()
        for q in self.collector.snapshot()["queues"]:
            if q["name"] == name:
                return {**q, "config": stored}
        raise QueueNotFound(f"queue {name!r} does not exist")

    def _jobs(self, req: Request) -> Response:
        queue = req.query.get("queue") or ""
        if not queue:
            raise InvalidRequest("queue is required")
        state = _state(req.query.get("state", "failed"))
        priority = _int(req, "priority", None, 1, 100)
        future = req.query.get("future", "") in ("1", "true")
        continuation = req.query.get("continuation") or CONTINUATION_START
        limit = _int(req, "limit", 50, 1, MAX_LIMIT) or 50
        result, coverage = covered(self.service.operators, lambda: self.service.scan(
            queue, state, priority=priority, future=future, continuation=continuation, limit=limit))
        jobs = [self._info(j, with_body=False) for j in result.jobs]
        return json_response(200, {"queue": queue, "state": state.name.lower(), "jobs": jobs,
                                   "continuation": result.continuation, **coverage})

    def _job(self, req: Request) -> Response:
        descriptor = req.query.get("descriptor", "").strip()
        if not descriptor:
            raise InvalidRequest("descriptor is required (QUEUE:sSHARD:pPRIORITY:ID)")
        with_body = req.query.get("body", "") in ("1", "true")
        found = self.service.lookup([descriptor], include_body=with_body)
        if descriptor not in found:
            raise ApiError(404, "JOB_NOT_FOUND", f"no job {descriptor} (finished jobs are collected after retention)")
        return json_response(200, self._info(found[descriptor], with_body=with_body))

    def _info(self, info: JobInfo, *, with_body: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "descriptor": info.descriptor,
            "state": info.state.name.lower(),
            "attempts_allowed": info.attempts_allowed,
            "attempts_remaining": info.attempts_remaining,
            "custom_status": info.custom_status,
            "created_at_ms": info.created_at_ms,
            "run_after_ms": info.run_after_ms,
            "updated_at_ms": info.updated_at_ms,
            "claimed_by": info.claim,  # the claim's holder: lookups never show its token
            "key": info.key,  # the fairness key ("" none)
        }
        if with_body and info.body is not None:
            body = info.body[: self.body_cap]
            out["body"] = body.decode("utf-8", errors="replace")
            out["body_bytes"] = len(info.body)
            out["body_truncated"] = len(info.body) > self.body_cap
        return out

    def _audit(self, req: Request) -> Response:
        return json_response(200, {"entries": self.audit.recent(_int(req, "limit", 50, 1, 1000) or 50)})

    def _operations(self) -> list[dict[str, Any]]:
        """The progress board's operations, then the batches that changed
        last (a batch reads as one: its jobs ended of its jobs)."""
        ops = self.progress.list()
        return ops + [batch_operation(b) for b in self.service.operators.recent_batches(BATCHES_SHOWN)]

    def _rates(self, req: Request) -> Response:
        minutes = _int(req, "minutes", MAX_MINUTES, 1, MAX_MINUTES) or MAX_MINUTES
        limit = _int(req, "limit", DEFAULT_QUEUES, 1, MAX_QUEUES) or DEFAULT_QUEUES
        return json_response(200, self.rates.charts(minutes, limit))

    def _metrics(self, req: Request) -> Response:
        return Response(200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def metrics_text(self) -> str:
        """``/metrics``: the ``registry``, which OpenTelemetry metrics read too (when on)."""
        return self.registry.text()

    def _metric_families(self) -> list[Family]:
        stats = {"passes": self.collector.passes, "failed_passes": self.collector.failed_passes}
        return families(self.collector.snapshot(), stats)

    # -- controls ------------------------------------------------------------------
    def _control(self, req: Request, queue: str, action: str) -> Response:
        self._require_token(req)
        if req.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise ApiError(415, "JSON_REQUIRED", "controls take a JSON body (Content-Type: application/json)")
        if len(req.body) > MAX_POST_BYTES:
            raise ApiError(413, "TOO_LARGE", f"request body over {MAX_POST_BYTES} bytes")
        try:
            raw = json.loads(req.body or b"{}", parse_constant=_refuse_constant, object_pairs_hook=_once_each)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            raise InvalidRequest(f"request body is not valid JSON: {reason}") from None
        caller = Caller(req.headers.get("x-pinlater-operator", "").strip(), req.remote)
        return json_response(200, self.controls.run(action, queue, raw, caller))


def _refuse_constant(token: str) -> None:
    # Python's json reads NaN, Infinity and -Infinity; JSON has no such numbers.
    raise ValueError(f"{token} is not a JSON number (numbers must be finite)")


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # {"rate": 5, "rate": null} would be whichever a reader takes: refused.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key[:40]!r} is given twice")
        out[key] = value
    return out


def _int(req: Request, name: str, default: int | None, lo: int, hi: int) -> int | None:
    text = req.query.get(name, "").strip()
    if not text:
        return default
    if not _DECIMAL.fullmatch(text):  # int() also reads other scripts' digits and "1_000"
        raise InvalidRequest(f"{name} must be a whole number, got {text[:40]!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _state(text: str) -> JobState:
    try:
        return JobState.parse(text)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


# Batches shown among the long operations.
BATCHES_SHOWN = 20
_BATCH_STATUS = {"open": "running", "sealed": "running", "complete": "done", "released": "done",
                 "cancelled": "failed"}


def batch_operation(b: BatchStatus) -> dict[str, Any]:
    """A batch as the progress panel shows an operation."""
    ended = b.succeeded + b.failed
    callback = {"released": "its callback released", "complete": "its callback being released",
                "cancelled": "cancelled"}.get(b.state, "waiting for its jobs" if b.state == "sealed" else
                                              "open: its maker may add jobs")
    return {
        "id": b.batch, "title": f"Batch {b.description or b.batch}", "done": ended, "total": b.total,
        "status": _BATCH_STATUS.get(b.state, "running"), "updated_at_ms": b.updated_at_ms,
        "fraction": None if not b.total else min(1.0, ended / b.total), "stale": False,
        "detail": f"{b.batch}: {b.succeeded:,} succeeded, {b.failed:,} failed, {b.pending:,} to go; {callback}",
        "batch": b.batch, "state": b.state,
    }
