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
    connected; returns (``time.monotonic()``, jobs) for every successful
    dequeue: the machine's processes share that clock, and a step of the
    wall clock (a host's time sync) does not move it."""
    events: list[tuple[float, int]] = []
    with JobService.from_settings(settings, source=f"rated-{name}") as client:
        client.count(queue, "pending")  # connected to every shard before the timeline starts
        ready.wait(timeout=120)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                jobs = client.dequeue(queue, batch)
            except DequeueRateLimited as exc:
                time.sleep(min(exc.retry_after_ms, 100) / 1000)
                continue
            if jobs:
                events.append((time.monotonic(), len(jobs)))
                client.ack(queue, succeeded=[Ack(j.descriptor) for j in jobs])
            else:
                time.sleep(0.01)
    return events


def capped_worker(
    settings: Settings, queue: str, threads: int, job_s: float, seconds: float, name: str, ready: Any
) -> list[tuple[float, float, float]]:
    """``threads`` workers that each dequeue one job, "run" it for
    ``job_s`` and ACK it, for ``seconds`` once every party of ``ready`` is
    there; per job: (started, ended, ACK returned), on ``time.monotonic()``, the start
    after the dequeue returned and the end before the ACK was sent."""
    import threading

    intervals: list[tuple[float, float, float]] = []
    lock = threading.Lock()
    core_client = JobService.from_settings(settings, source=f"capped-{name}")
    core_client.count(queue, "pending")
    ready.wait(timeout=120)
    end = time.monotonic() + seconds

    def work(i: int) -> None:
        client = JobService(core_client.core.sibling(), source=f"capped-{name}-{i}")
        done: list[Ack] = []
        started = ended = 0.0
        while time.monotonic() < end:
            # The last job's ACK rides along, as a worker's does: its slot
            # is freed before this dequeue takes one.
            jobs = client.dequeue(queue, 1, succeeded=done)
            if done:
                with lock:
                    intervals.append((started, ended, time.monotonic()))
            done = []
            if not jobs:
                time.sleep(0.1)  # as a worker polls an empty queue (a tenth of its default)
                continue
            started = time.monotonic()
            time.sleep(job_s)
            ended = time.monotonic()
            done = [Ack(jobs[0].descriptor)]
        if done:
            client.ack(queue, succeeded=done)
            with lock:
                intervals.append((started, ended, time.monotonic()))

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    core_client.close()
    return intervals


def hold_jobs(settings: Settings, queue: str, n: int, ready: Any) -> None:
    """Dequeue ``n`` jobs, say so through ``ready``, then hang until killed."""
    with JobService.from_settings(settings, source="doomed") as client:
        got = 0
        while got < n:
            got += len(client.dequeue(queue, n - got))
        ready.set()
        time.sleep(600)


def enqueue_unique(
    where: Settings | str, queue: str, unique: str, threads: int, each: int, ready: Any
) -> list[tuple[str, bool]]:
    """``threads`` threads each enqueue a job of key ``unique`` ``each``
    times, from when every party of ``ready`` is there; per enqueue, the
    descriptor answered and whether it was a duplicate. ``where``: the
    stores' settings (in-process) or a server's HOST:PORT (Thrift)."""
    from concurrent.futures import ThreadPoolExecutor

    from pinlater import Job
    from pinlater.thrift.client import ThriftClient

    def client() -> Any:
        if isinstance(where, str):
            return ThriftClient([where], source=f"producer-{os.getpid()}", timeout_s=30)
        return JobService.from_settings(where, source=f"producer-{os.getpid()}")

    clients = [client() for _ in range(threads)]
    try:
        def run(c: Any) -> list[tuple[str, bool]]:
            out = []
            for i in range(each):
                answer = c.enqueue(queue, [Job(b"sync %d" % i, unique=unique)])
                out.append((answer[0], answer.duplicates == (0,)))
            return out

        ready.wait(timeout=120)
        with ThreadPoolExecutor(threads) as pool:
            return [a for part in pool.map(run, clients) for a in part]
    finally:
        for c in clients:
            c.close()


def batch_worker(settings: Settings, queue: str, seed: int, hang_p: float, fail_p: float) -> None:
    """Runs ``queue``'s jobs until killed: each dequeued job, at random
    (``seed``), is left to its claim's expiry (``hang_p``), failed
    (``fail_p``; a retry left sends it back), or succeeded."""
    import random

    rng = random.Random(seed)
    with JobService.from_settings(settings, source=f"batch-worker-{os.getpid()}") as client:
        while True:
            jobs = client.dequeue(queue, 20)
            if not jobs:
                time.sleep(0.01)
                continue
            succeeded: list[Ack] = []
            failed: list[Ack] = []
            for job in jobs:
                roll = rng.random()
                if roll < hang_p:
                    continue
                (failed if roll < hang_p + fail_p else succeeded).append(Ack(job.descriptor, claim=job.claim,
                                                                             retry_delay_ms=1))
            client.ack(queue, succeeded=succeeded, failed=failed)
