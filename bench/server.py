"""Throughput through the Thrift server next to the in-process service, in
the same run, on the same backend.

For enqueue and for dequeue+ACK (ACKs riding on the next dequeue), with
batches of 1 and 100, several client processes drive either JobService
directly ("in-process") or ThriftClient against a `pinlater server`
subprocess ("server"). Target: with batches of 100 the server reaches at
least half the in-process throughput.

    python bench/server.py                       # Redis, about a minute
    python bench/server.py --backend mysql
    python bench/server.py --smoke --json out.json   # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pymysql
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pinlater import Ack, Job, JobService
from pinlater.settings import Settings, parse_shards
from pinlater.thrift_client import ThriftClient

BACKENDS = {
    "redis": ("r1=redis://127.0.0.1:16379/3", "redis://127.0.0.1:16379/4"),
    "mysql": ("d1=mysql://pinlater:pinlater@127.0.0.1:13306/pinlater_bench_srv", "redis://127.0.0.1:16379/4"),
}
BODY = b'{"pin_id": 1234567890123, "board_id": 987654321, "action": "fanout"}'


def settings_for(backend: str) -> Settings:
    shards, control = BACKENDS[backend]
    return Settings(shards=parse_shards(shards), control_url=control)


Client = JobService | ThriftClient


def open_client(backend: str, server: str | None) -> Client:
    source = f"bench-{os.getpid()}"
    if server is None:
        return JobService.from_settings(settings_for(backend), source=source)
    return ThriftClient([server], source=source, timeout_s=30)


# -- workloads (in worker processes) --------------------------------------------------------
def enqueue(backend: str, server: str | None, queue: str, jobs: int, batch: int) -> int:
    with open_client(backend, server) as client:
        done = 0
        while done < jobs:
            n = min(batch, jobs - done)
            client.enqueue(queue, [Job(BODY)] * n)
            done += n
    return done


def drain(backend: str, server: str | None, queue: str, jobs: int, batch: int) -> int:
    with open_client(backend, server) as client:
        done = 0
        acks: list[Ack] = []
        while done < jobs:
            got = client.dequeue(queue, min(batch, jobs - done), succeeded=acks)
            acks = [Ack(j.descriptor) for j in got]
            done += len(got)
            if not got:
                break
        if acks:
            client.ack(queue, succeeded=acks)
    return done


Work = Callable[[str, str | None, str, int, int], int]


def run_parallel(pool: ProcessPoolExecutor, processes: int, fn: Work, backend: str, server: str | None,
                 queue: str, jobs: int, batch: int) -> float:
    share = jobs // processes
    start = time.perf_counter()
    futures = [pool.submit(fn, backend, server, queue, share, batch) for _ in range(processes)]
    done = sum(f.result() for f in futures)
    elapsed = time.perf_counter() - start
    if done < share * processes:
        raise RuntimeError(f"{fn.__name__} did only {done} of {share * processes} jobs")
    return done / elapsed


# -- the server ----------------------------------------------------------------------------------
@contextmanager
def server_process(backend: str) -> Iterator[str]:
    shards, control = BACKENDS[backend]
    env = dict(os.environ, PINLATER_SHARDS=shards, PINLATER_CONTROL_URL=control)
    env.pop("PINLATER_SERVERS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pinlater.cli", "server", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "-1", "--no-monitor"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on ([\d.]+):(\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    try:
        yield f"{match.group(1)}:{match.group(2)}"
    finally:
        proc.terminate()
        proc.wait(30)


def reset(backend: str) -> None:
    shards, control = BACKENDS[backend]
    redis.Redis.from_url(control).flushdb()
    if backend == "redis":
        redis.Redis.from_url(shards.split("=", 1)[1]).flushdb()
    else:
        conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS pinlater_bench_srv")
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="redis")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    scale = 0.05 if args.smoke else 1.0
    sizes = {1: max(args.processes * 20, int(4000 * scale)), 100: max(args.processes * 200, int(80_000 * scale))}
    reset(args.backend)

    rows: list[dict[str, object]] = []
    context = multiprocessing.get_context("spawn")
    with server_process(args.backend) as address, \
            ProcessPoolExecutor(args.processes, mp_context=context) as pool:
        list(pool.map(time.sleep, [0] * args.processes))  # start the workers before timing
        with JobService.from_settings(settings_for(args.backend), source="bench-setup") as setup:
            for batch, jobs in sizes.items():
                for op, fn in (("enqueue", enqueue), ("dequeue+ack", drain)):
                    rates: dict[str, float] = {}
                    for mode, server in (("in-process", None), ("server", address)):
                        queue = f"bsrv_{mode[:2]}_{batch}_{uuid.uuid4().hex[:6]}"
                        setup.create_queue(queue)
                        if fn is drain:  # something to drain, enqueued in-process (not timed)
                            run_parallel(pool, args.processes, enqueue, args.backend, None, queue, jobs, 100)
                        rates[mode] = run_parallel(pool, args.processes, fn, args.backend, server, queue, jobs, batch)
                        if fn is drain:
                            remaining = setup.count(queue, "pending") + setup.count(queue, "running")
                            if remaining:
                                raise RuntimeError(f"{remaining} jobs left in {queue}")
                    ratio = rates["server"] / rates["in-process"]
                    rows.append({"backend": args.backend, "op": op, "batch": batch, "jobs": jobs,
                                 "processes": args.processes, "in_process_per_s": round(rates["in-process"]),
                                 "server_per_s": round(rates["server"]), "ratio": round(ratio, 2)})
                    print(f"{args.backend:6} {op:12} batch {batch:4}: in-process {rates['in-process']:9,.0f} jobs/s"
                          f"   server {rates['server']:9,.0f} jobs/s   ratio {ratio:5.2f}", flush=True)
    for row in rows:
        if row["batch"] == 100 and float(row["ratio"]) < 0.5:  # type: ignore[arg-type]
            print(f"below target: {row['op']} batch 100 through the server at {row['ratio']} of in-process")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
