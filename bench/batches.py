"""What a batch costs its jobs: draining 10,000 jobs that are one batch's,
against draining 10,000 plain jobs, in the same run (``vs_plain``; target:
at least 0.9, i.e. the batch adds at most 10%), on Redis and MySQL, with
dequeue+ACK batches of 1 and 100 by two client processes (bench/core.py's
drain). The batch's end is told at each ACK call, its callback released
once at the end (the row says the batch's state after the drain).

    python bench/batches.py            # full run
    python bench/batches.py --smoke    # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import PROCESSES, pl_drain, run_parallel, settings_for
from bench.results import write_json
from bench.workloads import BODY
from pinlater import Job, JobService

JOBS = 10_000


def fill(client: JobService, queue: str, jobs: int, batch: str | None) -> None:
    for start in range(0, jobs, 1000):
        client.enqueue(queue, [Job(BODY)] * min(1000, jobs - start), batch=batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--backends", default="redis,mysql")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    jobs = JOBS // 10 if args.smoke else JOBS
    rows: list[dict[str, object]] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        pool.submit(time.sleep, 0).result()
        for backend in args.backends.split(","):
            with JobService.from_settings(settings_for(backend), source="bench-batches") as client:
                for size in (1, 100):
                    tag = uuid.uuid4().hex[:6]
                    plain_q, batch_q, done_q = (f"bench_{backend}_{size}_{kind}_{tag}"
                                                for kind in ("plain", "batch", "done"))
                    for q in (plain_q, batch_q, done_q):
                        client.create_queue(q)
                    fill(client, plain_q, jobs, None)
                    plain = run_parallel(pool, pl_drain, backend, plain_q, jobs, size)
                    batch = client.create_batch(done_q, Job(b"done"))
                    fill(client, batch_q, jobs, batch)
                    client.seal_batch(batch)
                    rate = run_parallel(pool, pl_drain, backend, batch_q, jobs, size)
                    status = client.batch_status(batch)
                    rows.append({"backend": backend, "op": "dequeue+ack of one batch's jobs", "batch": size,
                                 "jobs": jobs, "jobs_per_s": round(rate), "plain_jobs_per_s": round(plain),
                                 "vs_plain": round(rate / plain, 2), "state": status.state,
                                 "succeeded": status.succeeded})
                    print(f"{backend:6} batch {size:4}: {rate:9,.0f} jobs/s, one batch's; plain {plain:9,.0f}: "
                          f"{rate / plain:5.2f}   batch {status.state}, {status.succeeded:,} succeeded",
                          flush=True)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
