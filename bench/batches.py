"""What a batch costs its jobs: draining jobs that are one batch's, against
draining as many plain jobs, in the same run (``vs_plain``; target: at
least 0.9, i.e. the batch adds at most 10%), on Redis and MySQL, with
dequeue+ACK batches of 1 and 100 by two client processes (bench/core.py's
drain, and its sizes: 10,000 jobs with batches of 1, 60,000 with batches
of 100); each figure the median of several rounds, the two kinds taking
turns to go first, because one drain lasts a few seconds at most. The
jobs' ends are told to the batch as the drain's ACKs apply, its callback
released once at the end (the row says the batch's state after the drain).

    python bench/batches.py            # full run
    python bench/batches.py --smoke    # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import PROCESSES, fresh_stores, pl_drain, run_parallel, settings_for
from bench.results import write_json
from bench.workloads import BODY
from pinlater import Job, JobService
from pinlater.models import BatchStatus

# Jobs per drain, by dequeue batch size (bench/core.py's): 10,000 jobs in
# batches of 100 drained in a quarter of a second, too short to measure.
JOBS = {1: 10_000, 100: 60_000}
ROUNDS = 9


def fill(client: JobService, queue: str, jobs: int, batch: str | None) -> None:
    for start in range(0, jobs, 1000):
        client.enqueue(queue, [Job(BODY)] * min(1000, jobs - start), batch=batch)


def drain_plain(pool: ProcessPoolExecutor, client: JobService, backend: str, size: int, jobs: int) -> float:
    queue = f"bench_{backend}_{size}_plain_{uuid.uuid4().hex[:6]}"
    client.create_queue(queue)
    fill(client, queue, jobs, None)
    return run_parallel(pool, pl_drain, backend, queue, jobs, size)


def drain_batch(
    pool: ProcessPoolExecutor, client: JobService, backend: str, size: int, jobs: int,
) -> tuple[float, BatchStatus]:
    tag = uuid.uuid4().hex[:6]
    queue, done = f"bench_{backend}_{size}_batch_{tag}", f"bench_{backend}_{size}_done_{tag}"
    for q in (queue, done):
        client.create_queue(q)
    batch = client.create_batch(done, Job(b"done"))
    fill(client, queue, jobs, batch)
    client.seal_batch(batch)
    rate = run_parallel(pool, pl_drain, backend, queue, jobs, size)
    return rate, client.batch_status(batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--backends", default="redis,mysql")
    parser.add_argument("--rounds", type=int, default=None, help=f"drains of each kind (default {ROUNDS}; smoke 1)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else ROUNDS)
    fresh_stores()
    rows: list[dict[str, object]] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        pool.submit(time.sleep, 0).result()
        for backend in args.backends.split(","):
            with JobService.from_settings(settings_for(backend), source="bench-batches") as client:
                for size, full in JOBS.items():
                    jobs = full // 10 if args.smoke else full
                    plains: list[float] = []
                    batched: list[tuple[float, BatchStatus]] = []
                    for r in range(rounds):
                        # Each kind goes first in every other round: neither gets the warmer machine.
                        if r % 2 == 0:
                            plains.append(drain_plain(pool, client, backend, size, jobs))
                            batched.append(drain_batch(pool, client, backend, size, jobs))
                        else:
                            batched.append(drain_batch(pool, client, backend, size, jobs))
                            plains.append(drain_plain(pool, client, backend, size, jobs))
                    plain = statistics.median(plains)
                    rate = statistics.median(r for r, _ in batched)
                    # Every round's batch must have ended whole; the row shows the last one's.
                    ended = all(st.state == "released" and st.succeeded == jobs for _, st in batched)
                    status = batched[-1][1]
                    rows.append({"backend": backend, "op": "dequeue+ack of one batch's jobs", "batch": size,
                                 "jobs": jobs, "jobs_per_s": round(rate), "plain_jobs_per_s": round(plain),
                                 "vs_plain": round(rate / plain, 2), "state": status.state,
                                 "succeeded": status.succeeded if ended else -1, "rounds": rounds})
                    print(f"{backend:6} batch {size:4}: {rate:9,.0f} jobs/s, one batch's; plain {plain:9,.0f}: "
                          f"{rate / plain:5.2f} (medians of {rounds})   batch {status.state}, "
                          f"{status.succeeded:,} succeeded", flush=True)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
