"""The one instrumented seam around every store call of the job service.

Every call the service makes on a shard goes through ``ShardSet.call``,
which hands its timing and outcome here. From this one place come:

* the per-queue event counters (enqueued, dequeued, succeeded, failed,
  claims expired, retried by an operator), from what each call returned;
* store-call metrics: calls, errors by kind and a latency histogram per
  shard and operation (``pinlater_store_*`` in Prometheus text);
* a trace span per call when tracing is on (``pinlater.observe.tracing``).

A caller names its operation and queue and does nothing else.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pinlater.engine import counters as events
from pinlater.engine.counters import EventCounters
from pinlater.observe import tracing

# shard -> operation -> calls, seconds, errors by kind, cumulative buckets.
Snapshot = dict[str, dict[str, dict[str, Any]]]
# Latency histogram bounds, seconds (a Redis call is ~0.1 ms, a slow MySQL
# transaction tens of milliseconds, a shard timing out seconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _applied(result: list[bool]) -> int:
    return sum(result)


# The store operations that are events, and how many each call's result counts.
EVENT_OF_OP: dict[str, tuple[str, Callable[[Any], int]]] = {
    "enqueue": (events.ENQUEUED, len),
    "dequeue": (events.DEQUEUED, lambda claims: len(claims.jobs)),
    "ack_succeeded": (events.SUCCEEDED, _applied),
    "ack_failed": (events.FAILED, _applied),
    "expire_claims": (events.CLAIMS_EXPIRED, lambda expired: expired.repended + expired.failed),
    "retry_failed": (events.RETRIED_BY_OPERATOR, int),
}


class _Series:
    __slots__ = ("buckets", "calls", "errors", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.errors: dict[str, int] = {}


class StoreMetrics:
    """Calls, errors and latency per (shard, operation), in this process.

    Each thread counts into series of its own, so that recording a call
    takes no lock (a lock cost more than the rest of the recording here);
    a snapshot sums every thread's, those of threads that ended included."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tables: list[dict[tuple[str, str], _Series]] = []

    def _table(self) -> dict[tuple[str, str], _Series]:
        table: dict[tuple[str, str], _Series] = {}
        self._local.table = table
        with self._lock:
            self._tables.append(table)
        return table

    def record(self, shard: str, op: str, seconds: float, error: str | None) -> None:
        if tracing.METRICS_ON:
            tracing.record_store_call(shard, op, seconds, error)
        table = getattr(self._local, "table", None)
        if table is None:
            table = self._table()
        series = table.get((shard, op))
        if series is None:
            series = table[shard, op] = _Series()
        series.calls += 1
        series.seconds += seconds
        series.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        if error is not None:
            series.errors[error] = series.errors.get(error, 0) + 1

    def _merged(self) -> dict[tuple[str, str], _Series]:
        with self._lock:
            tables = list(self._tables)
        merged: dict[tuple[str, str], _Series] = {}
        for table in tables:
            # A copy made in one step: its thread may add a series meanwhile.
            for key, s in list(table.items()):
                total = merged.get(key)
                if total is None:
                    total = merged[key] = _Series()
                total.calls += s.calls
                total.seconds += s.seconds
                total.buckets = [a + b for a, b in zip(total.buckets, s.buckets, strict=True)]
                for kind, n in list(s.errors.items()):
                    total.errors[kind] = total.errors.get(kind, 0) + n
        return merged

    def snapshot(self) -> Snapshot:
        """shard -> operation -> calls, seconds, errors by kind and the
        histogram's cumulative counts by upper bound (``+Inf`` last)."""
        out: Snapshot = {}
        for (shard, op), s in sorted(self._merged().items()):
            cumulative, running = {}, 0
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), s.buckets, strict=True):
                running += n
                cumulative[bound] = running
            out.setdefault(shard, {})[op] = {
                "calls": s.calls, "seconds": s.seconds, "errors": dict(s.errors), "buckets": cumulative,
            }
        return out

    def prometheus(self) -> str:
        return prometheus_text(self.snapshot())


def merge_snapshots(snapshots: Iterable[Snapshot]) -> Snapshot:
    """Several processes' snapshots as one: every count summed."""
    out: Snapshot = {}
    for snap in snapshots:
        for shard, ops in snap.items():
            for op, s in ops.items():
                total = out.setdefault(shard, {}).setdefault(
                    op, {"calls": 0, "seconds": 0.0, "errors": {}, "buckets": {}}
                )
                total["calls"] += s["calls"]
                total["seconds"] += s["seconds"]
                for kind, n in s["errors"].items():
                    total["errors"][kind] = total["errors"].get(kind, 0) + n
                for bound, n in s["buckets"].items():
                    total["buckets"][bound] = total["buckets"].get(bound, 0) + n
    return {shard: dict(sorted(ops.items())) for shard, ops in sorted(out.items())}


def prometheus_text(snap: Snapshot) -> str:
    lines = [
        "# HELP pinlater_store_calls_total Store calls made by the job service, by shard and operation.",
        "# TYPE pinlater_store_calls_total counter",
    ]
    rows = [(shard, op, s) for shard, ops in snap.items() for op, s in ops.items()]
    lines += [f'pinlater_store_calls_total{{shard="{sh}",op="{op}"}} {s["calls"]}' for sh, op, s in rows]
    lines += [
        "# HELP pinlater_store_errors_total Store calls that failed, by shard, operation and error.",
        "# TYPE pinlater_store_errors_total counter",
    ]
    for sh, op, s in rows:
        errors: dict[str, int] = s["errors"]
        lines += [
            f'pinlater_store_errors_total{{shard="{sh}",op="{op}",error="{kind}"}} {n}'
            for kind, n in sorted(errors.items())
        ]
    lines += [
        "# HELP pinlater_store_call_seconds Store call latency, by shard and operation.",
        "# TYPE pinlater_store_call_seconds histogram",
    ]
    for sh, op, s in rows:
        buckets: dict[str, int] = s["buckets"]
        labels = f'shard="{sh}",op="{op}"'
        lines += [f'pinlater_store_call_seconds_bucket{{{labels},le="{le}"}} {n}' for le, n in buckets.items()]
        lines.append(f"pinlater_store_call_seconds_sum{{{labels}}} {s['seconds']:.6f}")
        lines.append(f"pinlater_store_call_seconds_count{{{labels}}} {s['calls']}")
    return "\n".join(lines) + "\n"


class Seam:
    """What every store call reports to (see the module doc). Event
    counting starts once ``count_events`` is given the process's counters."""

    def __init__(self) -> None:
        self.metrics = StoreMetrics()
        self._counters: EventCounters | None = None

    def count_events(self, counters: EventCounters) -> None:
        self._counters = counters

    def done(self, shard: str, op: str, queue: str | None, seconds: float, result: object, span: Any) -> None:
        self.metrics.record(shard, op, seconds, None)
        counted = EVENT_OF_OP.get(op)
        if counted is not None and queue is not None and self._counters is not None:
            event, count = counted
            self._counters.add(queue, event, count(result))
        if span is not None:
            tracing.end_span(span, None)

    def failed(self, shard: str, op: str, seconds: float, error: BaseException, span: Any) -> None:
        self.metrics.record(shard, op, seconds, type(error).__name__)
        if span is not None:
            tracing.end_span(span, error)
