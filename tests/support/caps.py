"""Workers racing for a capped queue's slots, counting for themselves how
many of their jobs run at once, and the most of a set of spans open at
once (tests of ``QueueConfig.max_running``)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from pinlater import Ack, JobService
from pinlater.client_api import PinLaterClient


def most_running(
    client_of: Callable[[int], AbstractContextManager[PinLaterClient]], queue: str, total: int,
    workers: int, batch: Callable[[int], int] = lambda i: 2, timeout_s: float = 30,
) -> tuple[int, int]:
    """``workers`` threads, each with the client ``client_of(i)`` gives,
    dequeue (``batch(i)`` a call), "run" and ACK until ``total`` jobs are
    done; (jobs done, the most running at once by the workers' count)."""
    lock = threading.Lock()
    running = [0, 0]
    done = [0]

    def work(i: int) -> None:
        with client_of(i) as client:
            deadline = time.monotonic() + timeout_s
            while done[0] < total and time.monotonic() < deadline:
                jobs = client.dequeue(queue, batch(i))
                if not jobs:
                    time.sleep(0.003)
                    continue
                with lock:
                    running[0] += len(jobs)
                    running[1] = max(running[1], running[0])
                time.sleep(0.001)
                with lock:
                    running[0] -= len(jobs)
                    done[0] += len(jobs)
                client.ack(queue, succeeded=[Ack(j.descriptor) for j in jobs])

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, range(workers)))
    return done[0], running[1]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at a tie)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def held_per_key(client: JobService, queue: str) -> Counter[str]:
    """The per-key slots held in the control store, over every process."""
    held: Counter[str] = Counter()
    for (_, key), n in client.core.control.key_slots_owners(queue)[2].items():
        held[key] += n
    return held


def work_with_spans(
    client: PinLaterClient, queue: str, total: int, deadline: float, hold_s: float,
    spans: dict[bytes, list[tuple[float, float]]], lock: threading.Lock,
    refused: tuple[type[Exception], ...] = (),
) -> None:
    """One worker: dequeue 2 at a time, "run" them for ``hold_s`` and ACK
    them under their claims, adding each job's span (start, end) to
    ``spans`` by body, until ``spans`` holds ``total`` jobs or ``deadline``
    (monotonic) passes. The end is taken before the ACK, since a slot
    frees only after it. A dequeue raising one of ``refused`` counts as
    finding nothing."""
    while time.monotonic() < deadline:
        with lock:
            if sum(len(s) for s in spans.values()) >= total:
                return
        try:
            jobs = client.dequeue(queue, 2)
        except refused:
            jobs = []
        if not jobs:
            time.sleep(0.003)
            continue
        start = time.monotonic()
        time.sleep(hold_s)
        end = time.monotonic()
        client.ack(queue, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs])
        with lock:
            for j in jobs:
                spans[j.body].append((start, end))
