"""The one instrumented seam around every store call of the job service.

Every call the service makes on a shard goes through ``ShardSet.call``,
which hands its timing and outcome here. From this one place come:

* the per-queue event counters (enqueued, dequeued, succeeded, failed,
  claims expired, retried by an operator), from what each call returned;
* store-call metrics: calls, errors by kind and a latency histogram per
  shard and operation (``pinlater_store_*`` families of
  ``pinlater.observe.metrics``);
* a trace span per call when tracing is on (``pinlater.observe.tracing``).

A caller names its operation and queue and does nothing else.

The apps' own store calls (HBase, app-data MySQL) report here too, through
``app_call``: the same counting, timing and spans, as ``pinlater_app_store_*``
with the store's kind as a label.
"""

from __future__ import annotations

import bisect
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pinlater.engine import counters as events
from pinlater.engine.counters import EventCounters
from pinlater.observe import tracing
from pinlater.observe.metrics import Family, prometheus_text
from pinlater.states import JobState

T = TypeVar("T")

# shard -> operation -> calls, seconds, errors by kind, cumulative buckets.
Snapshot = dict[str, dict[str, dict[str, Any]]]
# Latency histogram bounds, seconds (a Redis call is ~0.1 ms, a slow MySQL
# transaction tens of milliseconds, a shard timing out seconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _applied(result: list[bool]) -> int:
    return sum(result)


def _stored(answers: list[Any]) -> int:
    return sum(1 for a in answers if isinstance(a, int))


def _duplicates(answers: list[Any]) -> int:
    return len(answers) - _stored(answers)


def _ended(cancelled: list[Any]) -> int:
    return sum(1 for c in cancelled if c.state is JobState.PENDING or c.state is JobState.RUNNING)


# The store operations that are events, and how many each call's result counts.
EVENT_OF_OP: dict[str, tuple[tuple[str, Callable[[Any], int]], ...]] = {
    "enqueue": ((events.ENQUEUED, len),),
    "enqueue_unique": ((events.ENQUEUED, _stored), (events.DUPLICATES, _duplicates)),
    "dequeue": ((events.DEQUEUED, lambda claims: len(claims.jobs)),),
    "ack_succeeded": ((events.SUCCEEDED, _applied),),
    "ack_failed": ((events.FAILED, _applied),),
    "expire_claims": ((events.CLAIMS_EXPIRED, lambda expired: expired.repended + expired.failed),),
    "retry_failed": ((events.RETRIED_BY_OPERATOR, int),),
    "cancel": ((events.CANCELLED, _ended),),
}


class _Series:
    __slots__ = ("buckets", "calls", "errors", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.errors: dict[str, int] = {}


Table = dict[tuple[str, str], _Series]

# Ended threads' series are folded into one table once this many threads
# have counted, then whenever their number doubles: a server with a thread
# per connection keeps as many tables as it has threads alive, not one per
# connection it ever had.
FOLD_AT = 64


def _add_into(total: Table, table: Table) -> None:
    # A copy made in one step: its thread may add a series meanwhile.
    for key, s in list(table.items()):
        into = total.get(key)
        if into is None:
            into = total[key] = _Series()
        into.calls += s.calls
        into.seconds += s.seconds
        into.buckets = [a + b for a, b in zip(into.buckets, s.buckets, strict=True)]
        for kind, n in list(s.errors.items()):
            into.errors[kind] = into.errors.get(kind, 0) + n


class StoreMetrics:
    """Calls, errors and latency per (shard, operation), in this process.

    Each thread counts into series of its own, so that recording a call
    takes no lock (a lock cost more than the rest of the recording here);
    a snapshot sums every thread's, those of threads that ended included
    (folded into one table as they are found ended)."""

    def __init__(self, store: str | None = None) -> None:
        self.store = store  # None: the job service's shards; else a kind of the apps' stores
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tables: list[tuple[weakref.ref[threading.Thread], Table]] = []
        self._ended: Table = {}
        self._fold_at = FOLD_AT

    def _table(self) -> Table:
        table: Table = {}
        self._local.table = table
        with self._lock:
            self._tables.append((weakref.ref(threading.current_thread()), table))
            if len(self._tables) >= self._fold_at:
                self._fold_ended()
                self._fold_at = max(FOLD_AT, 2 * len(self._tables))
        return table

    def _fold_ended(self) -> None:
        """Under the lock: the tables of threads that ended, which write no
        more, added into one."""
        alive = []
        for ref, table in self._tables:
            thread = ref()
            if thread is not None and thread.is_alive():
                alive.append((ref, table))
            else:
                _add_into(self._ended, table)
        self._tables = alive

    def record(self, shard: str, op: str, seconds: float, error: str | None) -> None:
        if tracing.METRICS_ON:
            tracing.record_store_call(self.store, shard, op, seconds, error)
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

    def _merged(self) -> Table:
        merged: Table = {}
        with self._lock:
            tables = [table for _, table in self._tables]
            _add_into(merged, self._ended)
        for table in tables:
            _add_into(merged, table)
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

    def families(self) -> list[Family]:
        return job_store_families(self.snapshot())

    def prometheus(self) -> str:
        return prometheus_text(self.families())


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


# Each group's families: the name prefix, and the help of calls, errors and latency.
_JOB_SERVICE = ("pinlater_store", "Store calls made by the job service, by shard and operation.",
                "Store calls that failed, by shard, operation and error.",
                "Store call latency, by shard and operation.")
_APPS = ("pinlater_app_store", "Store calls made by the apps, by store, shard (cluster or server) and operation.",
         "The apps' store calls that failed, by store, shard, operation and error.",
         "The apps' store call latency, by store, shard and operation.")


def store_families(snaps: Iterable[tuple[Snapshot, dict[str, str]]], prefix: str, calls_help: str,
                   errors_help: str, seconds_help: str) -> list[Family]:
    """Calls, errors and latency of the store calls in ``snaps`` (each with
    labels put before its shard and operation), as three families."""
    calls = Family(f"{prefix}_calls_total", "counter", calls_help)
    errors = Family(f"{prefix}_errors_total", "counter", errors_help)
    seconds = Family(f"{prefix}_call_seconds", "histogram", seconds_help)
    for snap, given in snaps:
        for shard, ops in snap.items():
            for op, s in ops.items():
                labels = {**given, "shard": shard, "op": op}
                calls.add(s["calls"], "", **labels)
                for kind, n in sorted(s["errors"].items()):
                    errors.add(n, "", **labels, error=kind)
                for le, n in s["buckets"].items():
                    seconds.add(n, "_bucket", **labels, le=le)
                seconds.add(s["seconds"], "_sum", **labels)
                seconds.add(s["calls"], "_count", **labels)
    return [calls, errors, seconds]


def job_store_families(snap: Snapshot) -> list[Family]:
    return store_families([(snap, {})], *_JOB_SERVICE)


_app_stores: dict[str, StoreMetrics] = {}
_app_lock = threading.Lock()


def app_store(kind: str) -> StoreMetrics:
    """This process's metrics of the apps' calls to one kind of store."""
    metrics = _app_stores.get(kind)
    if metrics is None:
        with _app_lock:
            metrics = _app_stores.setdefault(kind, StoreMetrics(kind))
    return metrics


def app_store_snapshot() -> dict[str, Snapshot]:
    """The apps' store calls in this process, by kind of store."""
    return {kind: m.snapshot() for kind, m in sorted(_app_stores.items())}


def app_store_families_of(snapshots: Iterable[dict[str, Snapshot]]) -> list[Family]:
    """Processes' ``app_store_snapshot``s, summed, as metric families."""
    by_kind: dict[str, list[Snapshot]] = {}
    for snapshot in snapshots:
        for kind, snap in snapshot.items():
            by_kind.setdefault(kind, []).append(snap)
    snaps = [(merge_snapshots(parts), {"store": kind}) for kind, parts in sorted(by_kind.items())]
    return store_families(snaps, *_APPS) if snaps else []


def app_store_families() -> list[Family]:
    """The apps' store calls in this process (none until the first)."""
    return app_store_families_of([app_store_snapshot()])


def app_call(store: str, target: str, op: str, work: Callable[[], T], attributes: Mapping[str, str]) -> T:
    """``work()``, an app's call to ``store`` (``hbase``, ``mysql``) at
    ``target`` (a cluster, a server): counted and timed as the job
    service's store calls are, in a span ``<store> <op>`` when tracing is on."""
    metrics = app_store(store)
    start = time.perf_counter()
    try:
        if tracing.ON:
            with tracing.span(f"{store} {op}", attributes, kind="client"):
                result = work()
        else:
            result = work()
    except BaseException as exc:
        metrics.record(target, op, time.perf_counter() - start, type(exc).__name__)
        raise
    metrics.record(target, op, time.perf_counter() - start, None)
    return result


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
            for event, count in counted:
                self._counters.add(queue, event, count(result))
        if span is not None:
            tracing.end_span(span, None)

    def failed(self, shard: str, op: str, seconds: float, error: BaseException, span: Any) -> None:
        self.metrics.record(shard, op, seconds, type(error).__name__)
        if span is not None:
            tracing.end_span(span, error)
