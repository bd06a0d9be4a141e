"""Event counters per queue, for rates on dashboards and in /metrics.

Each process counts its own events in memory and adds them to per-minute
buckets in the control store about once a second (one round trip per flush,
never one per job), so every process's work shows up in the same place.
Counting is best effort: a flush that fails is kept and retried with the
next one, but a process killed between flushes loses its last second.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Collection

from pinlater.stores.control import RETENTION_MINUTES, ControlStore

log = logging.getLogger(__name__)

ENQUEUED = "enqueued"
DEQUEUED = "dequeued"
SUCCEEDED = "succeeded"
FAILED = "failed"  # failure ACKs, whether retried or final
CLAIMS_EXPIRED = "claims_expired"
RETRIED_BY_OPERATOR = "retried_by_operator"
CANCELLED = "cancelled"  # pending or running jobs a cancel ended
DUPLICATES = "duplicates"  # enqueues answered with the job that held their unique key
EVENTS = (ENQUEUED, DEQUEUED, SUCCEEDED, FAILED, CLAIMS_EXPIRED, RETRIED_BY_OPERATOR, CANCELLED, DUPLICATES)


def current_minute(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // 60)


# A failing flush is logged when it starts and then at most this often.
FAILURE_LOG_INTERVAL_S = 60.0


class EventCounters:
    def __init__(self, control: ControlStore, flush_interval_s: float = 1.0) -> None:
        self._control = control
        self._interval = flush_interval_s
        self._lock = threading.Lock()
        self._pending: dict[int, dict[str, dict[str, int]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(int))
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_at = -math.inf  # when a failed flush was last logged

    def add(self, queue: str, event: str, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            self._pending[current_minute()][queue][event] += n
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="pinlater-counters", daemon=True)
                self._thread.start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
        for minute, counts in list(pending.items()):
            try:
                self._control.add_counts(minute, counts)
            except Exception as exc:  # noqa: BLE001 -- keep them for the next flush
                # Said when it starts, then once a minute: the flush runs every second.
                now = time.monotonic()
                if now - self._said_at >= FAILURE_LOG_INTERVAL_S:
                    self._said_at = now
                    log.warning("could not flush event counters (kept, tried again every %g s): %s",
                                self._interval, exc)
                with self._lock:
                    for queue, events in counts.items():
                        for event, n in events.items():
                            self._pending[minute][queue][event] += n
                return
            if self._said_at > -math.inf:
                self._said_at = -math.inf
                log.warning("event counters flushed again")

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()


def recent_rates(
    control: ControlStore, minutes: int = 5, now: float | None = None
) -> dict[str, dict[str, float]]:
    """queue -> event -> events per second over the last ``minutes`` whole
    minutes plus the current, partial one."""
    now = time.time() if now is None else now
    this_minute = current_minute(now)
    counts = control.read_counts(this_minute - minutes, this_minute)
    window_s = 60.0 * minutes + max(1.0, now - this_minute * 60)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for per_minute in counts.values():
        for queue, events in per_minute.items():
            for event, n in events.items():
                totals[queue][event] += n / window_s
    return {q: dict(e) for q, e in totals.items()}


def minute_series(
    control: ControlStore,
    queues: Collection[str] | None = None,
    minutes: int = 60,
    now: float | None = None,
) -> dict[str, dict[str, list[int]]]:
    """queue -> event -> events counted in each of the last ``minutes``
    minutes, oldest first; the last is the current, partial minute (minute
    ``current_minute(now)``). One read of the control store. Every event of
    EVENTS has a series, zeros where nothing happened; ``queues`` limits the
    answer to those (each present, even without events), else every queue
    with an event in the window."""
    if not 1 <= minutes <= RETENTION_MINUTES:
        raise ValueError(f"minutes must be between 1 and {RETENTION_MINUTES}, got {minutes}")
    last = current_minute(now)
    first = last - minutes + 1
    counts = control.read_counts(first, last)
    names = set(queues) if queues is not None else {q for per_minute in counts.values() for q in per_minute}
    series = {q: {e: [0] * minutes for e in EVENTS} for q in names}
    for minute, per_minute in counts.items():
        for queue, events in per_minute.items():
            for event, n in events.items():
                if queue in series and event in series[queue] and first <= minute <= last:
                    series[queue][event][minute - first] += n
    return series


def recent_totals(control: ControlStore, minutes: int = 60, now: float | None = None) -> dict[str, dict[str, int]]:
    """queue -> event -> events counted in the last ``minutes`` minutes."""
    this_minute = current_minute(now)
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for per_minute in control.read_counts(this_minute - minutes, this_minute).values():
        for queue, events in per_minute.items():
            for event, n in events.items():
                totals[queue][event] += n
    return {q: dict(e) for q, e in totals.items()}
