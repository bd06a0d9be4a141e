"""Redis memory per pending job, and throughput at that backlog.

Starts its own stock ``redis-server`` (default settings: no
``hash-max-listpack-*`` or other tuning; persistence off, which changes no
figure here) on a free 127.0.0.1 port, and for each body size and backlog:

* PinLater: fills one queue (one shard, priority 1) with N pending jobs,
  ``enqueue`` in batches of 1,000, and reports the growth of
  ``used_memory`` divided by N; then, with that backlog in place, the
  enqueue rate and the dequeue+ACK rate (batches of 100, one client);
* the floor: the same data in the leanest raw redis-py layout, one string
  per body plus one sorted set of ids scored by run_after (no attempts, no
  times, no claims, no atomicity), its bytes per job and the same two rates
  (enqueue: SET + ZADD pipelined; dequeue+ACK: ZPOPMIN, GET the bodies,
  DEL them).

The server is flushed between measurements and stopped at the end.

    python bench/redis_memory.py                        # 100,000 and 1,000,000 jobs, 100 B and 1 KiB bodies
    python bench/redis_memory.py --counts 20000 --bodies 100
    python bench/redis_memory.py --smoke --json out.json   # seconds, for CI
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_json
from pinlater import Ack, Job, JobService
from pinlater.settings import Settings, parse_shards

QUEUE = "mem"
FILL_BATCH = 1000
RATE_BATCH = 100


@dataclass(frozen=True)
class Row:
    layout: str  # "pinlater" or "floor"
    body_bytes: int
    jobs: int
    bytes_per_job: float
    enqueue_per_s: float
    dequeue_ack_per_s: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_redis() -> Iterator[int]:
    """A stock redis-server of our own, stopped (and its directory removed)
    whatever happens."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    workdir = tempfile.mkdtemp(prefix="pinlater-redis-memory-")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--logfile", str(Path(workdir) / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"redis-server on port {port} did not start") from None
                time.sleep(0.05)
        client.close()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def used_memory(r: redis.Redis[bytes]) -> int:
    return int(r.info("memory")["used_memory"])


def rate(fn: Callable[[int], int], jobs: int) -> float:
    """Jobs per second of ``fn(n) -> done``, called in RATE_BATCH steps."""
    done = 0
    started = time.perf_counter()
    while done < jobs:
        got = fn(min(RATE_BATCH, jobs - done))
        if got == 0:
            raise RuntimeError(f"ran dry after {done} of {jobs} jobs")
        done += got
    return done / (time.perf_counter() - started)


def measure_pinlater(port: int, body: bytes, jobs: int, rate_jobs: int) -> Row:
    url = f"redis://127.0.0.1:{port}"
    settings = Settings(shards=parse_shards(f"m1={url}/0"), control_url=f"{url}/1",
                        max_jobs_per_call=FILL_BATCH)
    r = redis.Redis(port=port)
    with JobService.from_settings(settings, source="bench-memory") as service:
        service.create_queue(QUEUE, priorities=1)
        service.count(QUEUE, "PENDING")  # scripts loaded, layout recorded: not per-job memory
        before = used_memory(r)
        batch = [Job(body)] * FILL_BATCH
        for start in range(0, jobs, FILL_BATCH):
            service.enqueue(QUEUE, batch[: min(FILL_BATCH, jobs - start)])
        per_job = (used_memory(r) - before) / jobs

        def enqueue(n: int) -> int:
            return len(service.enqueue(QUEUE, batch[:n]))

        acks: list[Ack] = []

        def drain(n: int) -> int:
            nonlocal acks
            got = service.dequeue(QUEUE, n, succeeded=acks)
            acks = [Ack(j.descriptor, claim=j.claim) for j in got]
            return len(got)

        enq = rate(enqueue, rate_jobs)
        deq = rate(drain, rate_jobs)
        if acks:
            service.ack(QUEUE, succeeded=acks)
    r.flushall()
    r.close()
    return Row("pinlater", len(body), jobs, per_job, enq, deq)


def measure_floor(port: int, body: bytes, jobs: int, rate_jobs: int) -> Row:
    r = redis.Redis(port=port)
    r.ping()
    before = used_memory(r)
    next_id = 0

    def enqueue(n: int) -> int:
        nonlocal next_id
        now = int(time.time() * 1000)
        pipe = r.pipeline(transaction=False)
        for i in range(next_id + 1, next_id + n + 1):
            pipe.set(f"b:{i}", body)
        pipe.zadd("pending", {str(i): now for i in range(next_id + 1, next_id + n + 1)})
        pipe.execute()
        next_id += n
        return n

    for start in range(0, jobs, FILL_BATCH):
        enqueue(min(FILL_BATCH, jobs - start))
    per_job = (used_memory(r) - before) / jobs

    def drain(n: int) -> int:
        popped = r.zpopmin("pending", n)
        keys = [f"b:{member.decode()}" for member, _score in popped]
        if not keys:
            return 0
        pipe = r.pipeline(transaction=False)
        pipe.mget(keys)
        pipe.delete(*keys)
        pipe.execute()
        return len(keys)

    enq = rate(enqueue, rate_jobs)
    deq = rate(drain, rate_jobs)
    r.flushall()
    r.close()
    return Row("floor", len(body), jobs, per_job, enq, deq)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="100000,1000000", help="backlogs (pending jobs), comma-separated")
    parser.add_argument("--bodies", default="100,1024", help="body sizes in bytes, comma-separated")
    parser.add_argument("--rate-jobs", type=int, default=20_000,
                        help="jobs enqueued and then dequeued+ACKed for the rates at each backlog")
    parser.add_argument("--smoke", action="store_true", help="30,000 jobs of 100 bytes: seconds, for CI")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.smoke:
        args.counts, args.bodies, args.rate_jobs = "30000", "100", 2000
    counts = [int(c) for c in args.counts.split(",")]
    bodies = [int(b) for b in args.bodies.split(",")]

    rows: list[Row] = []
    print(f"{'layout':9} {'body':>6} {'jobs':>10} {'bytes/job':>10} {'over body':>10} "
          f"{'enqueue/s':>10} {'deq+ack/s':>10}", flush=True)
    with private_redis() as port:
        redis.Redis(port=port).flushall()
        for size in bodies:
            body = (b"0123456789" * (size // 10 + 1))[:size]
            for jobs in counts:
                for measure in (measure_pinlater, measure_floor):
                    row = measure(port, body, jobs, args.rate_jobs)
                    rows.append(row)
                    print(f"{row.layout:9} {size:6} {jobs:10,} {row.bytes_per_job:10.1f} "
                          f"{row.bytes_per_job - size:10.1f} {row.enqueue_per_s:10,.0f} "
                          f"{row.dequeue_ack_per_s:10,.0f}", flush=True)
    write_json(args.json, [asdict(r) for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
