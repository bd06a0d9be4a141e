"""Fairness between tenants: a small tenant's wait while a big tenant's
backlog drains, with fairness keys and without, in the same run.

A big tenant's 100,000 jobs are enqueued first; then two worker processes
drain the queue (dequeues of 10, each batch's ACKs riding on the next
dequeue) while a third process enqueues one small-tenant job every 20 ms.
A small job's wait is from its enqueue to the dequeue that took it (both
on this machine's clock). With keys (the big tenant's jobs keyed "big",
the small ones "small") a dequeue serves the two in turn, so the small
tenant's p99 wait is a few dequeues; without keys it waits behind what is
left of the backlog. ``vs_unkeyed`` is the keyed p99 over the unkeyed.

Then the cost of many keys: the same number of jobs spread over 10 keys
and over 100,000 (one or two jobs a key, so lanes come and go all along),
drained by the same two workers; ``vs_10_keys`` is the drain rate with
many keys over the rate with 10 (a dequeue's cost must not grow with the
number of keys).

    python bench/fairness.py             # 100,000 big jobs, Redis and MySQL
    python bench/fairness.py --smoke     # 5,000, a few seconds (CI)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import settings_for
from bench.results import write_json
from bench.support import percentile_ms
from bench.workloads import enqueue_keyed
from pinlater import Ack, Job, JobService, JobState

WORKERS = 2
BATCH = 10
SMALL_EVERY_S = 0.02


def drain(backend: str, queue: str, stop_at: float) -> tuple[int, list[float]]:
    """A worker: jobs it took, and the waits (s) of the small ones."""
    waits: list[float] = []
    done = 0
    with JobService.from_settings(settings_for(backend), source=f"fair-{os.getpid()}") as client:
        acks: list[Ack] = []
        idle_since = None
        while time.time() < stop_at:
            got = client.dequeue(queue, BATCH, succeeded=acks)
            now = time.time()
            acks = [Ack(j.descriptor, claim=j.claim) for j in got]
            done += len(got)
            waits += [now - float(j.body[6:]) for j in got if j.body.startswith(b"small:")]
            if got:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since > 1.0:
                break  # drained, and the small tenant is done
            else:
                time.sleep(0.005)
        if acks:
            client.ack(queue, succeeded=acks)
    return done, waits


def drain_until_empty(backend: str, queue: str) -> tuple[int, float]:
    """A worker of a queue filled before it starts: the jobs it took, and
    when (wall clock) its last dequeue that got some ended."""
    done, last = 0, time.time()
    with JobService.from_settings(settings_for(backend), source=f"keys-{os.getpid()}") as client:
        acks: list[Ack] = []
        while True:
            got = client.dequeue(queue, BATCH, succeeded=acks)
            acks = [Ack(j.descriptor, claim=j.claim) for j in got]
            if not got:
                break
            done, last = done + len(got), time.time()
        if acks:
            client.ack(queue, succeeded=acks)
    return done, last


def keys_run(pool: ProcessPoolExecutor, backend: str, jobs: int, keys: int) -> dict[str, object]:
    queue = f"bench_fairkeys_{uuid.uuid4().hex[:8]}"
    with JobService.from_settings(settings_for(backend), source="keys-setup") as client:
        client.create_queue(queue)
        enqueue_keyed(client, queue, jobs, 1000, keys)
        started = time.time()
        results = [f.result() for f in [pool.submit(drain_until_empty, backend, queue) for _ in range(WORKERS)]]
        left = client.count(queue, JobState.PENDING)
    done = sum(n for n, _ in results)
    seconds = max(at for _, at in results) - started
    if done != jobs or left:
        raise RuntimeError(f"{backend}: {done} of {jobs} jobs drained, {left} left")
    row = {"backend": backend, "keys": keys, "jobs": jobs, "drain_s": round(seconds, 2),
           "jobs_per_s": round(jobs / seconds)}
    print(f"{backend:6} {keys:7,} keys: {jobs:,} jobs drained in {seconds:5.1f} s, {row['jobs_per_s']:,} jobs/s",
          flush=True)
    return row


def small_tenant(backend: str, queue: str, keyed: bool, until: float) -> int:
    made = 0
    with JobService.from_settings(settings_for(backend), source=f"small-{os.getpid()}") as client:
        client.queue_config(queue)
        while time.time() < until:
            client.enqueue(queue, [Job(b"small:%.6f" % time.time(), key="small" if keyed else "")])
            made += 1
            time.sleep(SMALL_EVERY_S)
    return made


def warm(backend: str, together: Any) -> int:
    """A pool process's imports and first connections, before any timing;
    ``together`` (a barrier of the pool's size) holds each process until
    all have one, so that no process takes two."""
    with JobService.from_settings(settings_for(backend), source=f"warm-{os.getpid()}") as client:
        client.queue_names()
    together.wait(timeout=120)
    return os.getpid()


def run(pool: ProcessPoolExecutor, backend: str, big: int, keyed: bool, small_s: float) -> dict[str, object]:
    queue = f"bench_fair_{uuid.uuid4().hex[:8]}"
    with JobService.from_settings(settings_for(backend), source="fair-setup") as client:
        client.create_queue(queue)
        for start in range(0, big, 1000):
            client.enqueue(queue, [Job(b"big", key="big" if keyed else "") for _ in range(min(1000, big - start))])
        started = time.time()
        until = started + small_s
        small = pool.submit(small_tenant, backend, queue, keyed, until)
        workers = [pool.submit(drain, backend, queue, until + 600) for _ in range(WORKERS)]
        made = small.result()
        results = [w.result() for w in workers]
        drained_s = time.time() - started
        left = client.count(queue, JobState.PENDING) + client.count(queue, JobState.PENDING, future=True)
    waits = [w for _, ws in results for w in ws]
    if len(waits) != made or left:
        raise RuntimeError(f"{backend}: {len(waits)} of {made} small jobs seen, {left} jobs left")
    row = {"backend": backend, "keyed": keyed, "big_jobs": big, "small_jobs": made,
           "small_wait_p50_ms": round(percentile_ms(waits, 0.5), 1),
           "small_wait_p99_ms": round(percentile_ms(waits, 0.99), 1),
           "drain_s": round(drained_s, 2)}
    print(f"{backend:6} {'keys' if keyed else 'no keys':8}: {big:,} big jobs drained in {drained_s:5.1f} s; "
          f"small tenant's wait p50 {row['small_wait_p50_ms']:8.1f} ms, p99 {row['small_wait_p99_ms']:8.1f} ms",
          flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="5,000 big jobs, for CI")
    parser.add_argument("--backends", default="redis,mysql")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    big = 5_000 if args.smoke else 100_000
    small_s = 1.0 if args.smoke else 5.0
    many_keys = 2_000 if args.smoke else 100_000
    rows: list[dict[str, object]] = []
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(WORKERS + 1, mp_context=context) as pool:
        for backend in args.backends.split(","):
            together = manager.Barrier(WORKERS + 1)
            for f in [pool.submit(warm, backend, together) for _ in range(WORKERS + 1)]:
                f.result()
            pair = {keyed: run(pool, backend, big, keyed, small_s) for keyed in (True, False)}
            keyed_p99, plain_p99 = pair[True]["small_wait_p99_ms"], pair[False]["small_wait_p99_ms"]
            pair[True]["vs_unkeyed"] = round(float(keyed_p99) / max(float(plain_p99), 0.1), 3)  # type: ignore[arg-type]
            rows += pair.values()
            few, many = (keys_run(pool, backend, big, k) for k in (10, many_keys))
            many["vs_10_keys"] = round(float(many["jobs_per_s"]) / float(few["jobs_per_s"]), 3)  # type: ignore[arg-type]
            rows += [few, many]
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
