"""Server statistics: requests, errors and latency per method, served as
Prometheus text at ``/metrics`` and as JSON at ``/stats.json`` by a small
HTTP server (``pinlater server-stats`` reads the JSON)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

# Latency percentiles are over each method's most recent calls.
WINDOW = 4096
QUANTILES = (0.5, 0.99)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass(slots=True)
class MethodStats:
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latency_sum_s: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))


class ServerStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._methods: dict[str, MethodStats] = {}
        self.started_at = time.time()
        self.connections_open = 0
        self.connections_total = 0
        self.connections_refused = 0
        self.connections_over_client_limit = 0
        self.connections_shed = 0
        self.bad_frames = 0
        self.frame_timeouts = 0
        self.frames_over_budget = 0
        self.buffered_bytes = 0
        self.in_flight = 0

    def record(self, method: str, seconds: float, error_code: str | None) -> None:
        with self._lock:
            m = self._methods.get(method)
            if m is None:
                m = self._methods[method] = MethodStats()
            m.requests += 1
            m.latency_sum_s += seconds
            m.recent.append(seconds)
            if error_code is not None:
                m.errors[error_code] = m.errors.get(error_code, 0) + 1

    def count(self, name: str, delta: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            methods = {
                name: (m.requests, dict(m.errors), m.latency_sum_s, sorted(m.recent))
                for name, m in sorted(self._methods.items())
            }
            out: dict[str, object] = {
                "uptime_s": round(time.time() - self.started_at, 3),
                "connections_open": self.connections_open,
                "connections_total": self.connections_total,
                "connections_refused": self.connections_refused,
                "connections_over_client_limit": self.connections_over_client_limit,
                "connections_shed": self.connections_shed,
                "bad_frames": self.bad_frames,
                "frame_timeouts": self.frame_timeouts,
                "frames_over_budget": self.frames_over_budget,
                "buffered_bytes": self.buffered_bytes,
                "in_flight": self.in_flight,
            }
        out["methods"] = {
            name: {
                "requests": requests,
                "errors": sum(errors.values()),
                "errors_by_code": errors,
                "latency_sum_s": latency_sum,
                "p50_ms": round(_quantile(recent, 0.5) * 1000, 3),
                "p99_ms": round(_quantile(recent, 0.99) * 1000, 3),
            }
            for name, (requests, errors, latency_sum, recent) in methods.items()
        }
        return out

    def prometheus(self) -> str:
        snap = self.snapshot()
        methods: dict[str, dict[str, object]] = snap["methods"]  # type: ignore[assignment]
        lines = [
            "# HELP pinlater_server_requests_total Thrift calls handled, by method.",
            "# TYPE pinlater_server_requests_total counter",
        ]
        lines += [f'pinlater_server_requests_total{{method="{n}"}} {m["requests"]}' for n, m in methods.items()]
        lines += [
            "# HELP pinlater_server_errors_total Thrift calls answered with an error, by method and code.",
            "# TYPE pinlater_server_errors_total counter",
        ]
        for name, m in methods.items():
            by_code: dict[str, int] = m["errors_by_code"]  # type: ignore[assignment]
            lines += [
                f'pinlater_server_errors_total{{method="{name}",code="{code}"}} {n}'
                for code, n in sorted(by_code.items())
            ]
        lines += [
            "# HELP pinlater_server_request_seconds Thrift call latency (quantiles over recent calls).",
            "# TYPE pinlater_server_request_seconds summary",
        ]
        for name, m in methods.items():
            for q, key in zip(QUANTILES, ("p50_ms", "p99_ms"), strict=True):
                value = float(m[key]) / 1000  # type: ignore[arg-type]
                lines.append(f'pinlater_server_request_seconds{{method="{name}",quantile="{q}"}} {value:.6f}')
            lines.append(f'pinlater_server_request_seconds_sum{{method="{name}"}} {m["latency_sum_s"]:.6f}')
            lines.append(f'pinlater_server_request_seconds_count{{method="{name}"}} {m["requests"]}')
        for key, kind, text in (
            ("connections_open", "gauge", "Open client connections."),
            ("connections_total", "counter", "Client connections accepted."),
            ("connections_refused", "counter", "Connections closed at once: every slot busy, none idle to shed."),
            ("connections_over_client_limit", "counter",
             "Connections closed at once: their address already held its limit."),
            ("connections_shed", "counter", "Idle or stalled connections closed to make room for others."),
            ("bad_frames", "counter", "Malformed, truncated or oversized frames (connection closed)."),
            ("frame_timeouts", "counter", "Connections closed: a frame not complete within the frame timeout."),
            ("frames_over_budget", "counter", "Requests refused: no room in the budget of buffered bytes."),
            ("buffered_bytes", "gauge", "Bytes reserved for requests over 64 KiB being read or handled."),
            ("in_flight", "gauge", "Calls being handled now."),
            ("uptime_s", "gauge", "Seconds since the server started."),
        ):
            metric = f"pinlater_server_{key}"
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}", f"{metric} {snap[key]}"]
        return "\n".join(lines) + "\n"


class MetricsServer:
    """``GET /metrics`` (Prometheus text) and ``GET /stats.json``."""

    def __init__(self, stats: ServerStats, host: str, port: int) -> None:
        self.stats = stats

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = stats.prometheus().encode(), "text/plain; version=0.0.4; charset=utf-8"
                elif path in ("/stats.json", "/stats"):
                    body, ctype = json.dumps(stats.snapshot()).encode(), "application/json"
                else:
                    self.send_error(404, "try /metrics or /stats.json")
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                log.debug("metrics: " + format, *args)

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._http.serve_forever, name="pinlater-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
