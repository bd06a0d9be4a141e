"""Throughput through the Thrift server next to the in-process service, in
the same run, on the same backend.

For enqueue and for dequeue+ACK (ACKs riding on the next dequeue), with
batches of 1 and 100, several client processes drive either JobService
directly ("in-process") or ThriftClient against `pinlater server
--processes N` subprocesses, one per N of ``--server-processes`` ("server"),
each measured right after the in-process run it is compared with. With
batches of one the same clients also drive a server that does no work
(``bench.echo_server``): the transport floor, what a call costs both ends
on this machine whatever the server. Each server row then also says what
the server spends per job beyond that floor and the in-process work (what
a server could still cut), and what the client spends beyond its floor.

The CPU of the stores' server processes (Redis, MariaDB) is measured too,
and with it each batch-of-one row prints a ceiling: the most a server
could reach on this machine if it added nothing but the transport floor
and did each call's work on its own (merging none), i.e. every core busy
with floor + in-process work + store work per job. A server can pass it
only by merging calls of several clients into one store call.

Targets: with batches of 100 the server reaches at least half the
in-process throughput; with batches of one and 4 clients, 0.8 of it (with
the most server processes measured).

With ``--tls`` each server count also runs a server with TLS, client
certificates and roles (certificates from ``pinlater.kit.devcerts``), measured
right after the plain one: the TLS rows give its throughput as a share of
plain TCP's and the CPU it adds per call, and a "connect" row what a new
connection costs (opened, one call, closed) with and without TLS. Target:
batches of 100 within 10% of plain TCP.

    python bench/server.py                       # Redis, one or two minutes
    python bench/server.py --backend mysql --server-processes 1,4
    python bench/server.py --smoke --json out.json   # a few seconds, for CI
    python bench/server.py --tls --server-processes 4
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pymysql
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_json
from bench.workloads import drain_all, enqueue_all
from pinlater import JobService
from pinlater.kit.devcerts import write_dev_certs
from pinlater.kit.tls import ClientTls
from pinlater.settings import Settings, parse_shards
from pinlater.thrift.client import ThriftClient

BACKENDS = {
    "redis": ("r1=redis://127.0.0.1:16379/3", "redis://127.0.0.1:16379/4"),
    "mysql": ("d1=mysql://pinlater:pinlater@127.0.0.1:13306/pinlater_bench_srv", "redis://127.0.0.1:16379/4"),
}


def settings_for(backend: str) -> Settings:
    shards, control = BACKENDS[backend]
    return Settings(shards=parse_shards(shards), control_url=control)


Client = JobService | ThriftClient


@dataclass(frozen=True)
class Endpoint:
    """A server as the client processes reach it."""

    address: str
    tls: ClientTls | None = None


def open_client(backend: str, server: Endpoint | None) -> Client:
    source = f"bench-{os.getpid()}"
    if server is None:
        return JobService.from_settings(settings_for(backend), source=source)
    return ThriftClient([server.address], source=source, timeout_s=30, tls=server.tls)


# -- workloads (in worker processes) --------------------------------------------------------
def enqueue(backend: str, server: Endpoint | None, queue: str, jobs: int, batch: int) -> int:
    with open_client(backend, server) as client:
        return enqueue_all(client, queue, jobs, batch)


def drain(backend: str, server: Endpoint | None, queue: str, jobs: int, batch: int) -> int:
    with open_client(backend, server) as client:
        return drain_all(client, queue, jobs, batch)


Work = Callable[[str, Endpoint | None, str, int, int], int]


def with_cpu(fn: Work, *args: Any) -> tuple[int, float]:
    """``fn``'s result and the CPU seconds this (worker) process spent on it."""
    started = time.process_time()
    done = fn(*args)
    return done, time.process_time() - started


@dataclass(frozen=True)
class Run:
    per_s: float
    client_cpu_us: float  # CPU of the client processes per job
    server_cpu_us: float = 0.0  # CPU of the server's processes per job
    store_cpu_us: float = 0.0  # CPU of the stores' server processes (Redis, MariaDB) per job


def process_cpu_s(pids: set[int], with_children_of: int | None = None) -> float:
    """CPU seconds used so far by ``pids`` (and by the children of
    ``with_children_of``)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(stat.parent.name) in pids or (with_children_of is not None and fields[1] == str(with_children_of)):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def store_pids(backend: str) -> set[int]:
    """The processes of the Redis (and MariaDB) servers the backend uses."""
    shards, control = BACKENDS[backend]
    pids = {int(redis.Redis.from_url(control).info("server")["process_id"])}
    if backend == "redis":
        pids.add(int(redis.Redis.from_url(shards.split("=", 1)[1]).info("server")["process_id"]))
    else:
        conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater")
        with conn.cursor() as cur:
            cur.execute("SELECT @@pid_file")
            row = cur.fetchone()
        conn.close()
        pids.add(int(Path(str(row[0])).read_text().split()[0]))  # type: ignore[index]
    return pids


def run_parallel(pool: ProcessPoolExecutor, processes: int, fn: Work, backend: str, server: Endpoint | None,
                 queue: str, jobs: int, batch: int) -> Run:
    share = jobs // processes
    start = time.perf_counter()
    futures = [pool.submit(with_cpu, fn, backend, server, queue, share, batch) for _ in range(processes)]
    results = [f.result() for f in futures]
    elapsed = time.perf_counter() - start
    done = sum(n for n, _ in results)
    if done < share * processes:
        raise RuntimeError(f"{fn.__name__} did only {done} of {share * processes} jobs")
    return Run(done / elapsed, 1e6 * sum(cpu for _, cpu in results) / done)


def measure(pool: ProcessPoolExecutor, setup: JobService, backend: str, processes: int, fn: Work,
            server: Server | None, jobs: int, batch: int) -> Run:
    """Throughput and CPU per job of ``fn`` on a new queue (drained to the last job)."""
    queue = f"bsrv_{batch}_{uuid.uuid4().hex[:8]}"
    setup.create_queue(queue)
    if fn is drain:  # something to drain, enqueued in-process (not timed)
        run_parallel(pool, processes, enqueue, backend, None, queue, jobs, 100)
    stores = store_pids(backend)
    server_cpu = server.cpu_s() if server else 0.0
    store_cpu = process_cpu_s(stores)
    run = run_parallel(pool, processes, fn, backend, server.endpoint if server else None, queue, jobs, batch)
    run = replace(run, store_cpu_us=1e6 * (process_cpu_s(stores) - store_cpu) / jobs)
    if server:
        run = replace(run, server_cpu_us=1e6 * (server.cpu_s() - server_cpu) / jobs)
    if fn is drain:
        remaining = setup.count(queue, "pending") + setup.count(queue, "running")
        if remaining:
            raise RuntimeError(f"{remaining} jobs left in {queue}")
    return run


# -- the server ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Server:
    address: str
    pid: int
    tls: ClientTls | None = None

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.address, self.tls)

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server's process and its children."""
        return process_cpu_s({self.pid}, with_children_of=self.pid)


@contextmanager
def listening(command: list[str], env: dict[str, str]) -> Iterator[Server]:
    """Runs ``command``, which prints "listening on HOST:PORT" when ready."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on ([\d.]+):(\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"{command[2]} did not start: {line!r}")
    try:
        yield Server(f"{match.group(1)}:{match.group(2)}", proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


def server_process(backend: str, processes: int,
                   tls_dir: Path | None = None) -> contextlib.AbstractContextManager[Server]:
    """A server; with ``tls_dir`` (``pinlater dev-certs``' files) one with
    TLS, client certificates and roles, called with the admin's certificate."""
    shards, control = BACKENDS[backend]
    env = dict(os.environ, PINLATER_SHARDS=shards, PINLATER_CONTROL_URL=control)
    env.pop("PINLATER_SERVERS", None)
    tls = None
    if tls_dir is not None:
        for line in (tls_dir / "server.env").read_text().splitlines():
            variable, _, value = line.partition("=")
            env[variable] = value
        tls = ClientTls(str(tls_dir / "ca.pem"), str(tls_dir / "admin.pem"), str(tls_dir / "admin.key"))
    return _with_tls(listening(
        [sys.executable, "-m", "pinlater.cli", "server", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "-1", "--no-monitor", "--processes", str(processes)],
        env,
    ), tls)


@contextmanager
def _with_tls(started: contextlib.AbstractContextManager[Server], tls: ClientTls | None) -> Iterator[Server]:
    with started as server:
        yield replace(server, tls=tls)


def connect_cost(server: Server, connections: int) -> tuple[float, float]:
    """(ms, CPU us of client and server) per new connection that makes one
    call and closes."""
    cpu = time.process_time()
    server_cpu = server.cpu_s()
    start = time.perf_counter()
    for _ in range(connections):
        with ThriftClient([server.address], source="bench-connect", tls=server.tls, retries=0) as client:
            client.queue_names()
    elapsed = time.perf_counter() - start
    used = time.process_time() - cpu + server.cpu_s() - server_cpu
    return 1000 * elapsed / connections, 1e6 * used / connections


def echo_process() -> contextlib.AbstractContextManager[Server]:
    return listening([sys.executable, "-m", "bench.echo_server"], dict(os.environ))


def transport_floor(pool: ProcessPoolExecutor, echo: Server, processes: int, fn: Work, jobs: int) -> Run:
    """``fn`` with batches of one against the echo server (bench.echo_server),
    which does no work: the client's and the server's CPU per call that no
    server on this transport can go below."""
    server_cpu = echo.cpu_s()
    run = run_parallel(pool, processes, fn, "redis", echo.endpoint, "bench_echo", jobs, 1)
    return replace(run, server_cpu_us=1e6 * (echo.cpu_s() - server_cpu) / jobs)


def overheads(local: Run, remote: Run, floor: Run) -> tuple[float, float]:
    """CPU per job that the client and the server spend beyond the transport
    floor, the server also beyond the in-process work (which it does in the
    client's stead)."""
    return (remote.client_cpu_us - floor.client_cpu_us,
            remote.server_cpu_us - floor.server_cpu_us - local.client_cpu_us)


def cpu_ceiling(local: Run, floor: Run, cores: int) -> tuple[float, float]:
    """(cores the in-process run kept busy, the highest ratio to it that a
    server adding only the transport floor and merging no calls could
    reach): at that ratio every core is busy with the floor, the
    in-process work and the store's work of each job."""
    in_process_us = local.client_cpu_us + local.store_cpu_us
    busy = in_process_us * local.per_s / 1e6
    most_per_s = cores * 1e6 / (floor.client_cpu_us + floor.server_cpu_us + in_process_us)
    return busy, most_per_s / local.per_s


def tls_row(args: argparse.Namespace, op: str, batch: int, jobs: int, n: int, plain: Run,
            secure: Run) -> dict[str, object]:
    """TLS beside plain TCP, the same work through the same number of server processes."""
    plain_cpu = (plain.client_cpu_us + plain.server_cpu_us) * batch
    tls_cpu = (secure.client_cpu_us + secure.server_cpu_us) * batch
    return {"backend": args.backend, "transport": "tls", "op": op, "batch": batch, "jobs": jobs,
            "processes": args.processes, "server_processes": n, "plain_per_s": round(plain.per_s),
            "tls_per_s": round(secure.per_s), "ratio_to_plain": round(secure.per_s / plain.per_s, 2),
            "plain_cpu_us_per_call": round(plain_cpu), "tls_cpu_us_per_call": round(tls_cpu),
            "tls_extra_cpu_us_per_call": round(tls_cpu - plain_cpu)}


def server_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,4, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"server processes must be 1 or more, got {text!r}")
    return counts


def batch_sizes(text: str) -> tuple[int, ...]:
    try:
        batches = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 1, 100 or 1,100, got {text!r}") from None
    if not batches or not set(batches) <= {1, 100}:
        raise argparse.ArgumentTypeError(f"the batch sizes measured are 1 and 100, got {text!r}")
    return batches


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
    parser.add_argument("--server-processes", type=server_counts, default=(1, 2, 4),
                        help="`pinlater server --processes` values to measure, comma-separated (default 1,2,4)")
    parser.add_argument("--batches", type=batch_sizes, default=(1, 100),
                        help="batch sizes to measure, comma-separated: 1, 100 or both (default 1,100)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--tls", action="store_true",
                        help="also measure each server count with TLS, client certificates and roles, beside plain TCP")
    args = parser.parse_args()
    scale = 0.05 if args.smoke else 1.0
    sizes = {1: max(args.processes * 20, int(20_000 * scale)), 100: max(args.processes * 200, int(80_000 * scale))}
    sizes = {batch: jobs for batch, jobs in sizes.items() if batch in args.batches}
    reset(args.backend)

    rows: list[dict[str, object]] = []
    cores = len(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    with ExitStack() as stack:
        servers = {n: stack.enter_context(server_process(args.backend, n)) for n in args.server_processes}
        tls_servers: dict[int, Server] = {}
        if args.tls:
            tls_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tls-")))
            write_dev_certs(tls_dir, days=1)
            tls_servers = {n: stack.enter_context(server_process(args.backend, n, tls_dir))
                           for n in args.server_processes}
        echo = stack.enter_context(echo_process()) if 1 in sizes else None
        pool = stack.enter_context(ProcessPoolExecutor(args.processes, mp_context=context))
        list(pool.map(time.sleep, [0] * args.processes))  # start the workers before timing
        setup = stack.enter_context(JobService.from_settings(settings_for(args.backend), source="bench-setup"))
        for batch, jobs in sizes.items():
            for op, fn in (("enqueue", enqueue), ("dequeue+ack", drain)):
                floor = transport_floor(pool, echo, args.processes, fn, jobs) if echo and batch == 1 else None
                if floor:
                    print(f"{args.backend:6} {op:12} batch {batch:4}: transport floor (a server doing nothing) "
                          f"CPU us/call: client {floor.client_cpu_us:5.0f} + server {floor.server_cpu_us:5.0f}",
                          flush=True)
                for n, server in servers.items():
                    # In-process right before each server run: the two see the same machine.
                    local = measure(pool, setup, args.backend, args.processes, fn, None, jobs, batch)
                    remote = measure(pool, setup, args.backend, args.processes, fn, server, jobs, batch)
                    ratio = remote.per_s / local.per_s
                    rows.append({"backend": args.backend, "op": op, "batch": batch, "jobs": jobs,
                                 "processes": args.processes, "server_processes": n,
                                 "in_process_per_s": round(local.per_s), "server_per_s": round(remote.per_s),
                                 "ratio": round(ratio, 2), "in_process_cpu_us": round(local.client_cpu_us),
                                 "in_process_store_cpu_us": round(local.store_cpu_us),
                                 "server_client_cpu_us": round(remote.client_cpu_us),
                                 "server_cpu_us": round(remote.server_cpu_us),
                                 "server_store_cpu_us": round(remote.store_cpu_us)})
                    beyond = ""
                    if floor:
                        client_extra, server_extra = overheads(local, remote, floor)
                        busy, ceiling = cpu_ceiling(local, floor, cores)
                        rows[-1].update(floor_client_cpu_us=round(floor.client_cpu_us),
                                        floor_server_cpu_us=round(floor.server_cpu_us),
                                        client_beyond_floor_us=round(client_extra),
                                        server_beyond_floor_us=round(server_extra),
                                        in_process_cores_busy=round(busy, 2), cores=cores,
                                        ceiling_without_merging=round(ceiling, 2))
                        beyond = (f"\n{'':35}beyond the floor: client {client_extra:4.0f}, server {server_extra:4.0f}; "
                                  f"in-process kept {busy:.1f} of {cores} cores busy; a server adding only the "
                                  f"floor, merging nothing, could reach at most {ceiling:.2f}")
                    print(f"{args.backend:6} {op:12} batch {batch:4}: in-process {local.per_s:9,.0f} jobs/s   "
                          f"server x{n} {remote.per_s:9,.0f} jobs/s   ratio {ratio:5.2f}   CPU us/job: "
                          f"in-process {local.client_cpu_us:5.0f} + store {local.store_cpu_us:4.0f}, "
                          f"via server {remote.client_cpu_us:5.0f} + server {remote.server_cpu_us:5.0f} "
                          f"+ store {remote.store_cpu_us:4.0f}{beyond}", flush=True)
                    if n in tls_servers:
                        secure = measure(pool, setup, args.backend, args.processes, fn, tls_servers[n], jobs, batch)
                        rows.append(tls_row(args, op, batch, jobs, n, remote, secure))
                        print(f"{'':6} {op:12} batch {batch:4}: TLS x{n} {secure.per_s:9,.0f} jobs/s, "
                              f"{rows[-1]['ratio_to_plain']:.2f} of plain TCP; CPU us/call: plain "
                              f"{rows[-1]['plain_cpu_us_per_call']:6.0f}, TLS {rows[-1]['tls_cpu_us_per_call']:6.0f}",
                              flush=True)
        for n, secure_server in tls_servers.items():
            connections = 20 if args.smoke else 300
            plain_ms, plain_cpu = connect_cost(servers[n], connections)
            tls_ms, tls_cpu = connect_cost(secure_server, connections)
            rows.append({"backend": args.backend, "transport": "tls", "op": "connect", "server_processes": n,
                         "connections": connections, "plain_ms_per_connection": round(plain_ms, 3),
                         "tls_ms_per_connection": round(tls_ms, 3),
                         "tls_extra_ms_per_connection": round(tls_ms - plain_ms, 3),
                         "tls_extra_cpu_us_per_connection": round(tls_cpu - plain_cpu)})
            print(f"{args.backend:6} {'connect':12} x{n}: a new connection and one call: plain {plain_ms:.2f} ms, "
                  f"TLS {tls_ms:.2f} ms; TLS adds {tls_cpu - plain_cpu:,.0f} CPU us (client and server)", flush=True)
    most = max(args.server_processes)
    for row in rows:
        if row.get("transport") == "tls":
            if row.get("batch") == 100 and float(row["ratio_to_plain"]) < 0.9:  # type: ignore[arg-type]
                print(f"below target: {row['op']} batch 100 over TLS x{row['server_processes']} at "
                      f"{row['ratio_to_plain']} of plain TCP (target 0.9)")
            continue
        target = 0.5 if row["batch"] == 100 else 0.8
        if row["server_processes"] == most and float(row["ratio"]) < target:  # type: ignore[arg-type]
            print(f"below target: {row['op']} batch {row['batch']} through {most} server processes at "
                  f"{row['ratio']} of in-process (target {target})")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
