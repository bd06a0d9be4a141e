"""Worker-process bodies for the multi-process tests (importable by spawn)."""

from __future__ import annotations

import os
import time
from typing import Any

from pinlater import Ack
from pinlater.errors import DequeueRateLimited
from pinlater.service import JobService
from pinlater.settings import Settings


def ready() -> int:
    """A first task for a spawned process: it imports this module (and the
    job service) before the timed work; the process's pid."""
    return os.getpid()


def drain(settings: Settings, queue: str, batch: int, idle_polls: int, name: str, ready: Any = None) -> list[str]:
    """Dequeue and ACK until the queue stays empty; returns what it got.
    With ``ready`` (a barrier shared by the drainers), start only once every
    drainer is connected: a spawned process can take seconds to start on a
    busy machine, and the first could drain everything meanwhile."""
    got: list[str] = []
    empty = 0
    with JobService.from_settings(settings, source=f"drainer-{name}") as client:
        if ready is not None:
            ready.wait(timeout=120)
        pending: list[Ack] = []
        while empty < idle_polls:
            jobs = client.dequeue(queue, batch, succeeded=pending)
            pending = [Ack(j.descriptor) for j in jobs]
            got += [j.descriptor for j in jobs]
            if jobs:
                empty = 0
            else:
                empty += 1
                time.sleep(0.05)
        if pending:
            client.ack(queue, succeeded=pending)
    return got


def timed_dequeues(
    settings: Settings, queue: str, batch: int, seconds: float, name: str, ready: Any
) -> list[tuple[float, int]]:
    """Dequeue (and ACK) as fast as the rate limit allows for ``seconds``
    from when every party of the barrier ``ready`` (the test too) is there,
    connected; returns (wall time, jobs) for every successful dequeue."""
    events: list[tuple[float, int]] = []
    with JobService.from_settings(settings, source=f"rated-{name}") as client:
        client.count(queue, "pending")  # connected to every shard before the timeline starts
        ready.wait(timeout=120)
        end = time.time() + seconds
        while time.time() < end:
            try:
                jobs = client.dequeue(queue, batch)
            except DequeueRateLimited as exc:
                time.sleep(min(exc.retry_after_ms, 100) / 1000)
                continue
            if jobs:
                events.append((time.time(), len(jobs)))
                client.ack(queue, succeeded=[Ack(j.descriptor) for j in jobs])
            else:
                time.sleep(0.01)
    return events
