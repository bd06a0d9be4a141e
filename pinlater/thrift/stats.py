"""Server statistics: requests, errors and latency per method and the
connection counters, served as Prometheus text at ``/metrics`` and as JSON
at ``/stats.json`` by a small HTTP server (``pinlater.kit.httpserver``;
``pinlater server-stats`` reads the JSON).

They live in a ``StatsTable``: one slot of fixed layout per server process,
in memory that ``pinlater server --processes N`` shares between its parent
and the N children (each child writes only its own slot; the parent serves
the sum over all slots). With one process the table is one slot of private
memory. A slot's counters outlive its process, so the totals stay whole when
a child dies and is replaced; its gauges (open connections, calls in
flight, buffered bytes) are zeroed when it exits. Latency quantiles are over
each method's most recent calls in every process together.
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

from pinlater.errors import ErrorCode
from pinlater.kit.httpserver import Answer, HttpHandler, HttpServer, Request, error_answer, http_tls, json_answer
from pinlater.observe import tracing
from pinlater.observe.metrics import Family, Registry, Source, prometheus_text
from pinlater.observe.seam import app_store_families
from pinlater.thrift import service

log = logging.getLogger(__name__)

# Latency percentiles are over each method's most recent calls (per process).
WINDOW = 4096
QUANTILES = (0.5, 0.99)

COUNTERS = (
    "connections_open", "connections_total", "connections_refused", "connections_over_client_limit",
    "connections_shed", "bad_frames", "frame_timeouts", "frames_over_budget", "buffered_bytes", "in_flight",
    # TLS: handshakes done, failed (bad certificates, garbage), plain-TCP
    # clients closed at their first byte; calls outside the caller's role.
    "tls_handshakes", "tls_handshake_failures", "tls_plaintext_refused", "calls_denied",
)
# The state of a live process, meaningless once it exited.
GAUGES = ("connections_open", "buffered_bytes", "in_flight")
UNKNOWN_METHOD = "unknown_method"
# A process whose accept loop has not beaten for this long is left out when
# the others decide who accepts next (see StatsTable.may_accept).
HEARTBEAT_STALE_S = 1.0

# The layout, in 8-byte words (an int64 or a float64 each). Header (the
# start on the monotonic clock, which every process of the machine shares
# and a stepped wall clock does not move):
_STARTED_AT, _HEADER_WORDS = 0, 8
# A slot: the process, then the counters, then one block per method.
_PID, _READY, _HEARTBEAT, _RESTARTS, _COUNTER0 = 0, 1, 2, 3, 4
_METHOD0 = _COUNTER0 + len(COUNTERS)
# A method's block: requests, latency sum, calls recorded in the ring,
# errors per code, the ring of recent latencies.
_M_REQUESTS, _M_LATENCY, _M_RECORDED, _M_ERRORS = 0, 1, 2, 3
_COUNTER_INDEX = {name: _COUNTER0 + i for i, name in enumerate(COUNTERS)}


class StatsLayout:
    """The methods and error codes one kind of server counts (a slot's
    layout follows from them), and the prefix of its metric names."""

    def __init__(self, methods: Iterable[str], codes: Iterable[str], prefix: str) -> None:
        self.methods = (*sorted(methods), UNKNOWN_METHOD)
        self.codes = (*codes, "UNKNOWN_METHOD")
        self.prefix = prefix
        self.ring = _M_ERRORS + len(self.codes)
        method_words = self.ring + WINDOW
        self.slot_words = _METHOD0 + len(self.methods) * method_words
        self.method_index = {name: _METHOD0 + i * method_words for i, name in enumerate(self.methods)}
        self.code_index = {name: _M_ERRORS + i for i, name in enumerate(self.codes)}


PINLATER = StatsLayout(service.thrift_services, (code.name for code in ErrorCode), "pinlater_server")


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _shared_file(size: int) -> int:
    """A file descriptor of ``size`` zeroed bytes that exist only in memory
    (a memfd where the OS has them), to be mapped by several processes."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pinlater-server-stats", os.MFD_CLOEXEC)
    else:  # pragma: no cover -- macOS
        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    os.ftruncate(fd, size)
    return fd


class StatsTable:
    """The statistics of ``slots`` server processes (see the module doc)."""

    def __init__(self, buffer: bytearray | mmap.mmap, slots: int, layout: StatsLayout = PINLATER) -> None:
        if len(buffer) != self.size(slots, layout):
            raise ValueError(f"a stats table of {slots} slots is {self.size(slots, layout)} bytes, "
                             f"not {len(buffer)}")
        self.slots = slots
        self.layout = layout
        self._buffer = buffer
        view = memoryview(buffer)
        self._int = view.cast("q")
        self._float = view.cast("d")

    @staticmethod
    def size(slots: int, layout: StatsLayout = PINLATER) -> int:
        return 8 * (_HEADER_WORDS + slots * layout.slot_words)

    @classmethod
    def private(cls, layout: StatsLayout = PINLATER) -> StatsTable:
        """One slot, for a server that is one process."""
        table = cls(bytearray(cls.size(1, layout)), 1, layout)
        table._float[_STARTED_AT] = time.monotonic()
        table.process_started(0, os.getpid())
        table.mark_ready(0)
        return table

    @classmethod
    def shared(cls, slots: int, layout: StatsLayout = PINLATER) -> tuple[StatsTable, int]:
        """A table in shared memory, and the descriptor children attach to."""
        fd = _shared_file(cls.size(slots, layout))
        table = cls(mmap.mmap(fd, cls.size(slots, layout)), slots, layout)
        table._float[_STARTED_AT] = time.monotonic()
        return table, fd

    @classmethod
    def attach(cls, fd: int, slots: int, layout: StatsLayout = PINLATER) -> StatsTable:
        """The table a parent shared (the descriptor it passed), of the
        parent's ``layout``."""
        mapped = mmap.mmap(fd, cls.size(slots, layout))
        os.close(fd)  # the mapping stays
        return cls(mapped, slots, layout)

    def _base(self, slot: int) -> int:
        if not 0 <= slot < self.slots:
            raise IndexError(f"slot {slot} of a table of {self.slots}")
        return _HEADER_WORDS + slot * self.layout.slot_words

    # -- one process's slot (written by that process, or by the parent around its life) --
    def process_started(self, slot: int, pid: int) -> None:
        base = self._base(slot)
        self._int[base + _READY] = 0
        self._int[base + _PID] = pid

    def mark_ready(self, slot: int) -> None:
        base = self._base(slot)
        self._float[base + _HEARTBEAT] = time.monotonic()
        self._int[base + _READY] = 1

    def ready(self, slot: int) -> bool:
        return bool(self._int[self._base(slot) + _READY])

    def pid(self, slot: int) -> int:
        return self._int[self._base(slot) + _PID]

    def process_exited(self, slot: int, *, restarting: bool) -> None:
        """Zeroes the slot's gauges (its counters stay in the totals)."""
        base = self._base(slot)
        self._int[base + _READY] = 0
        self._int[base + _PID] = 0
        for name in GAUGES:
            self._int[base + _COUNTER_INDEX[name]] = 0
        if restarting:
            self._int[base + _RESTARTS] += 1

    def may_accept(self, slot: int) -> bool:
        """Whether ``slot``'s process should accept the next connection:
        no other live process holds fewer (clients keep their connections
        for long, so each goes to the least loaded process, not to the one
        that happens to wake first). Also beats the slot's heartbeat."""
        base = self._base(slot)
        now = time.monotonic()
        self._float[base + _HEARTBEAT] = now
        mine = self._int[base + _COUNTER_INDEX["connections_open"]]
        for other in range(self.slots):
            theirs = self._base(other)
            if (other != slot and self._int[theirs + _READY]
                    and now - self._float[theirs + _HEARTBEAT] < HEARTBEAT_STALE_S
                    and self._int[theirs + _COUNTER_INDEX["connections_open"]] < mine):
                return False
        return True

    def add(self, slot: int, name: str, delta: int) -> None:
        self._int[self._base(slot) + _COUNTER_INDEX[name]] += delta

    def value(self, slot: int, name: str) -> int:
        return self._int[self._base(slot) + _COUNTER_INDEX[name]]

    def record(self, slot: int, method: str, seconds: float, error_code: str | None) -> None:
        layout = self.layout
        block = self._base(slot) + layout.method_index[method]
        ints, floats = self._int, self._float
        ints[block + _M_REQUESTS] += 1
        floats[block + _M_LATENCY] += seconds
        recorded = ints[block + _M_RECORDED]
        floats[block + layout.ring + recorded % WINDOW] = seconds
        ints[block + _M_RECORDED] = recorded + 1
        if error_code is not None:
            ints[block + layout.code_index[error_code]] += 1

    # -- the whole server --------------------------------------------------------------------
    def _method_blocks(self, method: str) -> Iterator[int]:
        for slot in range(self.slots):
            yield self._base(slot) + self.layout.method_index[method]

    def snapshot(self) -> dict[str, object]:
        ints, floats, layout = self._int, self._float, self.layout
        ring = layout.ring
        out: dict[str, object] = {"uptime_s": round(time.monotonic() - floats[_STARTED_AT], 3)}
        for name in COUNTERS:
            out[name] = sum(self.value(slot, name) for slot in range(self.slots))
        methods: dict[str, object] = {}
        for method in layout.methods:
            blocks = list(self._method_blocks(method))
            requests = sum(ints[b + _M_REQUESTS] for b in blocks)
            if not requests:
                continue
            errors = {code: n for code in layout.codes
                      if (n := sum(ints[b + layout.code_index[code]] for b in blocks))}
            recent = sorted(v for b in blocks
                            for v in floats[b + ring : b + ring + min(ints[b + _M_RECORDED], WINDOW)])
            methods[method] = {
                "requests": requests,
                "errors": sum(errors.values()),
                "errors_by_code": errors,
                "latency_sum_s": sum(floats[b + _M_LATENCY] for b in blocks),
                "p50_ms": round(_quantile(recent, 0.5) * 1000, 3),
                "p99_ms": round(_quantile(recent, 0.99) * 1000, 3),
            }
        processes = []
        for slot in range(self.slots):
            base = self._base(slot)
            processes.append({
                "process": slot,
                "pid": ints[base + _PID],
                "connections_open": self.value(slot, "connections_open"),
                "connections_total": self.value(slot, "connections_total"),
                "requests": sum(ints[b + _M_REQUESTS] for b in self._slot_method_blocks(slot)),
                "restarts": ints[base + _RESTARTS],
            })
        out["process_restarts"] = sum(int(p["restarts"]) for p in processes)
        out["processes"] = processes
        out["methods"] = methods
        return out

    def _slot_method_blocks(self, slot: int) -> Iterator[int]:
        base = self._base(slot)
        for method in self.layout.methods:
            yield base + self.layout.method_index[method]

    def families(self) -> list[Family]:
        return families(self.snapshot(), self.layout.prefix)


class ServerStats:
    """What one server process counts, into its slot of a ``StatsTable``
    (a private one-slot table unless given one). ``stats.bad_frames`` and
    the other COUNTERS read this process's own values; ``snapshot`` and
    ``prometheus`` are the whole table's."""

    def __init__(self, table: StatsTable | None = None, slot: int = 0, layout: StatsLayout = PINLATER) -> None:
        self.table = table or StatsTable.private(layout)
        self.slot = slot
        self._lock = threading.Lock()

    def record(self, method: str, seconds: float, error_code: str | None, *, finished_call: bool = False) -> None:
        """One call of ``method``; with ``finished_call``, it also leaves
        ``in_flight`` (one lock for both)."""
        with self._lock:
            if finished_call:
                self.table.add(self.slot, "in_flight", -1)
            self.table.record(self.slot, method, seconds, error_code)
        if tracing.METRICS_ON:
            tracing.record_server_call(method, seconds)

    def count(self, name: str, delta: int = 1) -> None:
        with self._lock:
            self.table.add(self.slot, name, delta)

    def __getattr__(self, name: str) -> int:
        if name in _COUNTER_INDEX:
            return self.table.value(self.slot, name)
        raise AttributeError(name)

    def snapshot(self) -> dict[str, object]:
        return self.table.snapshot()

    def families(self) -> list[Family]:
        return self.table.families()

    def prometheus(self) -> str:
        return prometheus_text(self.families())


_SERVER_METRICS = (
    ("connections_open", "gauge", "Open client connections."),
    ("connections_total", "counter", "Client connections accepted."),
    ("connections_refused", "counter", "Connections closed at once: every slot busy, none idle to shed."),
    ("connections_over_client_limit", "counter", "Connections closed at once: their address already held its limit."),
    ("connections_shed", "counter", "Idle or stalled connections closed to make room for others."),
    ("bad_frames", "counter", "Malformed, truncated or oversized frames (connection closed)."),
    ("frame_timeouts", "counter", "Connections closed: a frame not complete within the frame timeout."),
    ("frames_over_budget", "counter", "Requests refused: no room in the budget of buffered bytes."),
    ("buffered_bytes", "gauge", "Bytes reserved for requests over 64 KiB being read or handled."),
    ("in_flight", "gauge", "Calls being handled now."),
    ("tls_handshakes", "counter", "TLS handshakes completed."),
    ("tls_handshake_failures", "counter", "TLS handshakes that failed: a certificate refused, a bad or slow hello."),
    ("tls_plaintext_refused", "counter", "Connections to the TLS port closed at their first byte: not TLS."),
    ("calls_denied", "counter", "Calls refused: outside the caller's role or queues."),
    ("uptime_s", "gauge", "Seconds since the server started."),
    ("process_restarts", "counter", "Server processes that exited unexpectedly and were replaced."),
)
_PROCESS_METRICS = (
    ("pid", "gauge", "Operating system process id of each server process (0: not running)."),
    ("connections_open", "gauge", "Open client connections, by server process."),
    ("requests", "counter", "Thrift calls handled, by server process."),
)


def families(snap: dict[str, object], prefix: str = PINLATER.prefix) -> list[Family]:
    """The server's ``snapshot`` as metric families (``pinlater.observe.metrics``)."""
    methods: dict[str, dict[str, object]] = snap["methods"]  # type: ignore[assignment]
    requests = Family(f"{prefix}_requests_total", "counter", "Thrift calls handled, by method.")
    errors = Family(f"{prefix}_errors_total", "counter",
                    "Thrift calls answered with an error, by method and code.")
    seconds = Family(f"{prefix}_request_seconds", "summary",
                     "Thrift call latency (quantiles over recent calls).")
    for name, m in methods.items():
        requests.add(m["requests"], method=name)  # type: ignore[arg-type]
        by_code: dict[str, int] = m["errors_by_code"]  # type: ignore[assignment]
        for code, n in sorted(by_code.items()):
            errors.add(n, method=name, code=code)
        for q, key in zip(QUANTILES, ("p50_ms", "p99_ms"), strict=True):
            seconds.add(float(m[key]) / 1000, method=name, quantile=q)  # type: ignore[arg-type]
        seconds.add(m["latency_sum_s"], "_sum", method=name)  # type: ignore[arg-type]
        seconds.add(m["requests"], "_count", method=name)  # type: ignore[arg-type]
    out = [requests, errors, seconds]
    out += [Family(f"{prefix}_{key}", kind, text).add(snap[key])  # type: ignore[arg-type]
            for key, kind, text in _SERVER_METRICS]
    processes: list[dict[str, int]] = snap["processes"]  # type: ignore[assignment]
    out.append(Family(f"{prefix}_processes", "gauge", "Server processes running.")
               .add(sum(1 for p in processes if p["pid"])))
    for key, kind, text in _PROCESS_METRICS:
        family = Family(f"{prefix}_process_{key}" + ("_total" if kind == "counter" else ""), kind, text)
        for p in processes:
            family.add(p[key], process=p["process"])
        out.append(family)
    return out


class StatsSource(Protocol):
    def snapshot(self) -> dict[str, object]: ...

    def families(self) -> list[Family]: ...


class MetricsServer(HttpServer):
    """``GET /metrics`` (Prometheus text) and ``GET /stats.json`` (also
    ``/stats``), on the project's hardened HTTP server. ``/metrics`` is
    its ``registry``: the stats, ``more`` (the job service's store calls),
    the apps' store calls made in this process, and this HTTP server's own
    counts (``pinlater_http_*``) last."""

    def __init__(self, stats: StatsSource, host: str, port: int, more: Source | None = None) -> None:
        self.stats = stats
        super().__init__("metrics", _MetricsHandler, host, port, tls=http_tls())
        self.registry = Registry(stats.families, *([more] if more is not None else []), app_store_families,
                                 self.metric_families)
        tracing.observe_metrics(self.metric_families)  # what the server's own stats leave out

    @property
    def port(self) -> int:
        return self.address[1]


class _MetricsHandler(HttpHandler):
    server: MetricsServer

    def answer(self, request: Request) -> Answer:
        if request.path == "/metrics":
            return Answer(200, self.server.registry.text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if request.path in ("/stats.json", "/stats"):
            return json_answer(200, self.server.stats.snapshot())
        return error_answer(404, f"no such path: {request.path[:100]} (try /metrics or /stats.json)")
