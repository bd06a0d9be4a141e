"""The rate charts (``GET /api/rates?minutes=&limit=``): per queue, jobs per
second enqueued, dequeued, succeeded and failed in each minute of the last
hour, from the event counters (the job service's ``minute_series``).

One read of the control store (the minute buckets of the last hour) is
cached for ``ttl_s`` and shared by every request, like the snapshot; a
shorter window is cut from it. The queues are the snapshot's (so the charts
show the queues the table shows, and no deleted one), at most ``limit`` of
them: the busiest over the window, ties by name, returned in name order so
that charts do not jump about between refreshes. Its shape:

    taken_at_ms, minutes, minute_starts_ms: [ms, oldest first],
    last_minute_s, queues_total, truncated,
    queues: [{name, rates: {event: [per_s, oldest first]}, events: {event: n}}]

for the events of CHART_EVENTS. A full minute's rate is its count over 60 s;
the last minute is the current one, its count over the ``last_minute_s``
seconds of it gone so far (at least 1), so the line ends at now rather than
dipping each time a minute starts. ``events`` are the window's counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pinlater.operators import DEQUEUED, ENQUEUED, FAILED, SUCCEEDED, current_minute

CHART_EVENTS = (ENQUEUED, DEQUEUED, SUCCEEDED, FAILED)
MAX_MINUTES = 60
DEFAULT_QUEUES, MAX_QUEUES = 20, 100

Series = dict[str, dict[str, list[int]]]
# (queues, minutes, now) -> queue -> event -> counts per minute, oldest first
ReadSeries = Callable[[list[str], int, float], Series]


class RateCharts:
    def __init__(self, read_series: ReadSeries, queue_names: Callable[[], list[str]], ttl_s: float = 2.0) -> None:
        self._read_series = read_series
        self._queue_names = queue_names
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, float, Series] | None = None  # (monotonic, wall clock, series)

    def _read(self) -> tuple[float, Series]:
        # One read at a time: concurrent requests wait for it and share it.
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < self.ttl_s:
                return self._cached[1], self._cached[2]
            now = time.time()
            series = self._read_series(self._queue_names(), MAX_MINUTES, now)
            self._cached = (time.monotonic(), now, series)
            return now, series

    def charts(self, minutes: int = MAX_MINUTES, limit: int = DEFAULT_QUEUES) -> dict[str, Any]:
        now, series = self._read()
        last = current_minute(now)
        first = last - minutes + 1
        last_minute_s = max(1.0, now - last * 60)
        window = {q: {e: events[e][-minutes:] for e in CHART_EVENTS} for q, events in series.items()}
        shown = _busiest(window, limit)
        return {
            "taken_at_ms": int(now * 1000),
            "minutes": minutes,
            "minute_starts_ms": [m * 60_000 for m in range(first, last + 1)],
            "last_minute_s": round(last_minute_s, 3),
            "queues_total": len(window),
            "truncated": len(shown) < len(window),
            "queues": [
                {"name": q, "rates": {e: _per_second(s, last_minute_s) for e, s in window[q].items()},
                 "events": {e: sum(s) for e, s in window[q].items()}}
                for q in shown
            ],
        }


def _busiest(window: Mapping[str, Mapping[str, list[int]]], limit: int) -> list[str]:
    activity = {q: sum(sum(s) for s in events.values()) for q, events in window.items()}
    chosen = sorted(activity, key=lambda q: (-activity[q], q))[:limit]
    return sorted(chosen)


def _per_second(counts: list[int], last_minute_s: float) -> list[float]:
    rates = [round(n / 60, 4) for n in counts]
    rates[-1] = round(counts[-1] / last_minute_s, 4)
    return rates
