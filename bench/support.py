"""Helpers shared by the HBase benchmarks (bench/feeds.py, bench/typeahead.py):
an open-loop request driver, percentiles, rounds that rotate which
measurement goes first, and the region servers' GC pauses."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)
class OpenLoop(Generic[T, R]):
    """What an open-loop phase saw: per answered request its item, its
    latency from the scheduled time (seconds) and what ``call`` returned."""

    requests: int
    answered: list[tuple[T, float, R]] = field(default_factory=list)
    errors: int = 0
    late_start_s: float = 0.0  # the most a request was submitted after its due time


def open_loop(call: Callable[[T], R], items: Sequence[T], rate: float, threads: int = 64) -> OpenLoop[T, R]:
    """Request ``i`` (``call(items[i])``) is due at start + i/rate, whatever
    the earlier ones are doing; its latency counts from then, so queueing
    behind slow requests (or for a free thread) is not hidden."""
    out: OpenLoop[T, R] = OpenLoop(len(items))
    lock = threading.Lock()

    def one(due: float, item: T) -> None:
        try:
            result = call(item)
        except Exception:  # noqa: BLE001 (counted, and the run goes on)
            with lock:
                out.errors += 1
            return
        latency = time.perf_counter() - due
        with lock:
            out.answered.append((item, latency, result))

    start = time.perf_counter() + 0.1
    with ThreadPoolExecutor(max_workers=threads) as executor:
        for i, item in enumerate(items):
            due = start + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            out.late_start_s = max(out.late_start_s, time.perf_counter() - due)
            executor.submit(one, due, item)
    return out


def percentile_ms(values_s: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0..1, nearest rank) of seconds, in ms; NaN when empty."""
    ordered = sorted(values_s)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def rotating(rounds: int, *measures: Callable[[], float]) -> list[list[float]]:
    """``rounds`` runs of every measurement, each round starting one later in
    the list than the last, so no one of them always runs first or last
    (HBase flushes its memstores as data piles up, and whichever runs later
    in a round pays for what ran before it)."""
    out: list[list[float]] = [[] for _ in measures]
    for round_ in range(rounds):
        for i in range(len(measures)):
            k = (round_ + i) % len(measures)
            out[k].append(measures[k]())
    return out


_GC_PAUSE = re.compile(r"^\[(\d{4}-\d\d-\d\dT[\d:.]+[+-]\d{4})\]\[[\d.]+s\] GC\(\d+\) Pause .* ([\d.]+)ms$")


def gc_pauses(cluster: str, since: float, until: float) -> dict[str, float]:
    """The GC pauses ``scripts/hbase``'s region server of ``cluster`` logged
    between two ``time.time()`` values: count, longest and total, in ms."""
    var = Path(os.environ.get("PINLATER_VAR", Path(__file__).resolve().parent.parent / ".var"))
    pauses: list[float] = []
    for log in sorted((var / "hbase" / cluster / "logs").glob("gc.log*")):
        for line in log.read_text(errors="replace").splitlines():
            match = _GC_PAUSE.match(line)
            if match:
                at = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
                if since <= at <= until:
                    pauses.append(float(match.group(2)))
    return {"count": len(pauses), "max_ms": max(pauses, default=0.0), "total_ms": round(sum(pauses), 1)}
