"""Helpers shared by the HBase benchmarks (bench/feeds.py, bench/typeahead.py):
an open-loop request driver, percentiles, and rounds that alternate which
of two measurements goes first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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


def alternating(
    rounds: int, first: Callable[[], float], second: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """``rounds`` runs of both measurements, ``first`` ahead in even rounds
    and ``second`` in odd ones (HBase flushes its memstore as data piles up,
    and the later phase of a round would pay for both)."""
    a: list[float] = []
    b: list[float] = []
    for round_ in range(rounds):
        if round_ % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b
