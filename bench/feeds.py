"""Following feeds on HBase: fan-out write throughput against a raw
happybase ceiling, and feed-read latency with the primary up and stalled.

Fan-out: one account with F followers pins P times; the fan-out tasks
(Celery workers on PinLater: pages of 1,000 followers, each putting its
cells on both clusters itself, a write job only for a cluster it could not
write) put F x P cells into each cluster. Timed from the first enqueue to
the last fan-out or write job's ACK. Beside it, in the same run, two
ceilings putting the same cells with as many processes as the workers have
pool processes, half per cluster: a raw happybase loop (batches of 1,000
rows at the pin's timestamp, the write jobs' shape) and a raw Thrift2 loop
(one putMultiple of 1,000 rows a page, a timestamp per cell, as the write
jobs send them). Each round starts with a different one; the medians are
compared, the tasks against the faster ceiling. Then the same task rounds
with the feed table's trimming coprocessor taken off both clusters (new
workers), where each fan-out page reads sampled rows looking for feeds to
trim: the write-path cost the coprocessor removes.

Reads: feeds of 100 pins for 2,000 users; a FeedReader (pins joined from
MySQL) at a fixed request rate, latency measured from each request's
scheduled time (so a stall is not hidden by the client waiting). A "cold"
phase first, reported on its own (on servers just started, their JIT has
not compiled the read path yet), then 10,000 reads as fast as they go, then
the measured phases. The
primary is reached through a local TCP relay that the benchmark can stall
(it stops forwarding, as a hung region server would): "up" and "stalled"
both go through it.

    python bench/feeds.py              # F=50,000, P=4, 2 rounds; reads 100/s for 10 s
    python bench/feeds.py --cap 4 --trim-slack 2
                                       # feeds past the cap during the rounds: without
                                       # the coprocessor, fan-outs make trim jobs
    python bench/feeds.py --smoke      # small and quick (CI)
    python bench/feeds.py --json out.json

Uses the local servers of ``scripts/services`` with its own PinLater Redis
dbs (14, 15), app-data databases (``appdata_bench_``) and HBase tables
(prefix ``bench``), all made fresh each run.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import random
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import happybase  # noqa: E402
import redis  # noqa: E402
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]  # noqa: E402
from thriftpy2.rpc import make_client  # noqa: E402
from thriftpy2.transport.buffered import TCyBufferedTransportFactory  # type: ignore[attr-defined]  # noqa: E402

from bench.results import write_json  # noqa: E402
from bench.support import (  # noqa: E402
    CpuCost,
    cpu_snapshot,
    cpu_spent,
    idle_cpu,
    open_loop,
    percentile_ms,
    rotating,
    warn_of_quick_jit,
)
from pinlater.errors import QueueNotFound  # noqa: E402
from pinlater.service import JobService  # noqa: E402
from pinlater.settings import Settings  # noqa: E402
from tasks.appdata import generate, graph, schema  # noqa: E402
from tasks.appdata.generate import GraphSpec  # noqa: E402
from tasks.appdata.settings import AppDataSettings  # noqa: E402
from tasks.appdata.store import AppData  # noqa: E402
from tasks.feeds import queues  # noqa: E402
from tasks.feeds.actions import FeedActions  # noqa: E402
from tasks.feeds.cells import FAMILY, TABLE, qualifier, row_key  # noqa: E402
from tasks.feeds.local import worker_processes  # noqa: E402
from tasks.feeds.read import FeedReader, FeedUnavailable  # noqa: E402
from tasks.feeds.settings import FeedSettings  # noqa: E402
from tasks.feeds.tables import feed_table  # noqa: E402
from tasks.hbase import ClusterPair, HBaseSettings, drop_table, ensure_tables  # noqa: E402
from tasks.hbase.idl import THRIFT2  # noqa: E402
from tasks.hbase.settings import Address  # noqa: E402
from tasks.hbase.tables import (  # noqa: E402
    TRIM_CAP_ATTRIBUTE,
    TableDef,
    apply_table,
    detach_coprocessor,
    installed_tables,
)

SHARD_URL = "redis://127.0.0.1:16379/14"
CONTROL_URL = "redis://127.0.0.1:16379/15"
BENCH_ENV = {
    "PINLATER_SHARDS": f"b1={SHARD_URL}",
    "PINLATER_CONTROL_URL": CONTROL_URL,
    "PINLATER_BUS_PREFIX": "benchfeeds:",
    "PINLATER_CELERY_IMPORTS": "tasks.feeds.tasks",
    "PINLATER_APPDATA_DATABASE_PREFIX": "appdata_bench_",
    "PINLATER_HBASE_TABLE_PREFIX": "bench",
    "PINLATER_FEED_PAGE_SIZE": "1000",
    "PINLATER_POLL_INTERVAL_S": "0.2",
}


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCH_ENV)
    env.pop("PINLATER_SERVERS", None)
    env["PYTHONPATH"] = str(REPO)
    return env


# ------------------------------------------------------------------ fan-out


def raw_put(address: str, prefix: str, pages: list[list[int]], column: bytes, timestamp: int) -> None:
    """One mutateRows per page (1,000 rows, in key order), as the write jobs send them."""
    host, port = address.rsplit(":", 1)
    connection = happybase.Connection(host, int(port), table_prefix=prefix, timeout=60_000)
    try:
        table = connection.table(TABLE)
        for page in pages:
            with table.batch(timestamp=timestamp) as batch:
                for user in sorted(page):
                    batch.put(row_key(user), {column: b""})
    finally:
        connection.close()


def raw2_put(address: str, prefix: str, pages: list[list[int]], column: bytes, timestamp: int) -> None:
    """One Thrift2 putMultiple per page (1,000 rows, in key order), each cell
    at its own timestamp (the write jobs give each cell its follow's time;
    here distinct times below the pin's), plain thriftpy2."""
    host, port = address.rsplit(":", 1)
    client = make_client(THRIFT2.THBaseService, host, int(port), timeout=60_000,
                         proto_factory=TCyBinaryProtocolFactory(), trans_factory=TCyBufferedTransportFactory())
    family, _, name = column.partition(b":")
    table = f"{prefix}_{TABLE}".encode() if prefix else TABLE.encode()
    try:
        for page in pages:
            client.putMultiple(table, [
                THRIFT2.TPut(row=row_key(user), columnValues=[
                    THRIFT2.TColumnValue(family=family, qualifier=name, value=b"", timestamp=timestamp - i)])
                for i, user in enumerate(sorted(page))])
    finally:
        client.close()


def raw_round(hbase: HBaseSettings, pages: list[list[int]], pins: list[tuple[int, int]], procs: int,
              thrift2: bool = False) -> float:
    """A ceiling: the same cells in the same batches, plain happybase (or
    plain Thrift2 with a timestamp per cell), ``procs`` processes (half per
    cluster)."""
    per_cluster = max(1, procs // 2)
    work = []
    addresses = (hbase.primary_thrift2, hbase.standby_thrift2) if thrift2 else (hbase.primary, hbase.standby)
    for address in map(str, addresses):
        for pin_id, created in pins:
            column = f"{FAMILY}:".encode() + qualifier(created, pin_id)
            for part in range(per_cluster):
                work.append((address, hbase.table_prefix, pages[part::per_cluster], column, created))
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with ctx.Pool(per_cluster * 2) as pool:
        pool.starmap(raw2_put if thrift2 else raw_put, work)
    return time.perf_counter() - started


def task_round(service: JobService, actions: FeedActions, celebrity: int, board: int, count: int) -> float:
    """From the first enqueue to the last ACK, in the shard's clock: the end
    is read from the finished jobs, so the wait for them can poll slowly and
    cost the machine next to nothing."""
    started_ms = service.operators.shard_now_ms()
    for _ in range(count):
        actions.create_pin(celebrity, board, {"title": "bench"})
    deadline = time.monotonic() + 600
    while left := sum(service.count(q, s) for q in MEASURED for s in ("pending", "running")):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/feeds.py: {left} feed jobs still not done after 10 minutes")
        time.sleep(0.5)
    ended_ms = max(_finished_since(service, queue, started_ms) for queue in MEASURED)
    return (ended_ms - started_ms) / 1000


# Trims too: without the coprocessor, feeds past the cap make trim jobs,
# part of the fan-out's cost (none run at the default cap here).
MEASURED = (queues.FANOUT, queues.WRITE_PRIMARY, queues.WRITE_STANDBY, queues.TRIM)


def _finished_since(service: JobService, queue: str, since_ms: int) -> int:
    latest = since_ms
    for priority in (1, 2, 3):
        continuation = "0"
        while continuation != "-1":
            result = service.scan(queue, "succeeded", priority=priority, continuation=continuation, limit=1000)
            latest = max([latest, *(job.updated_at_ms for job in result.jobs if job.created_at_ms >= since_ms)])
            continuation = result.continuation
    return latest


def fanout_bench(args: argparse.Namespace, env: dict[str, str], service: JobService, store: AppData,
                 hbase: HBaseSettings, feed: TableDef) -> dict[str, Any]:
    spec = GraphSpec(users=args.followers + 1, boards=10, pins=0, follows_per_user=0, board_follows_per_user=0,
                     celebrities=1, celebrity_followers=args.followers, seed=4)
    summary = generate.generate(store, spec)
    celebrity = summary.celebrity_ids[0]
    board = graph.create_board(store, celebrity, {"name": "bench"}).id
    fans: list[int] = []
    pages: list[list[int]] = []  # the fan-out's pages, in its order
    cursor = None
    while True:
        page = graph.followers_of_user(store, celebrity, limit=1000, cursor=cursor)
        if page.ids:
            pages.append(page.ids)
            fans.extend(page.ids)
        if page.next is None:
            break
        cursor = page.next
    actions = FeedActions(store, service, FeedSettings.from_env(env))
    actions.ensure_queues()
    logdir = REPO / ".var" / "bench"
    logdir.mkdir(parents=True, exist_ok=True)
    pool_procs = args.workers * args.concurrency
    cells = len(fans) * args.pins * 2

    def raw(thrift2: bool) -> float:
        pins = [(random.randrange(1, 2**36), int(time.time() * 1000) + i) for i in range(args.pins)]
        return raw_round(hbase, pages, pins, pool_procs, thrift2)

    cpu = CpuCost()
    with worker_processes(env, args.workers, logdir, concurrency=args.concurrency, name="benchfeeds"):
        task_round(service, actions, celebrity, board, 1)  # warm: workers up, connections open
        raw_s, raw2_s, task_s = rotating(
            args.rounds, cpu.costed("raw", lambda: raw(False)), cpu.costed("raw_thrift2", lambda: raw(True)),
            cpu.costed("tasks", lambda: task_round(service, actions, celebrity, board, args.pins)))
    # Pages put their own cells while the write queues run freely: what
    # went through write jobs instead, over the warm-up and the rounds.
    write_jobs = {queue: service.count(queue, "succeeded") for queue in queues.WRITE.values()}
    # The same rounds with the feed table's trimming coprocessor taken off
    # both clusters, as on an HBase without the project's jar: each fan-out
    # page then reads sampled rows to find feeds to trim. New workers: a
    # worker reads the trimming mode once a minute.
    pair = ClusterPair.from_settings(hbase)
    try:
        for pool in pair:
            detach_coprocessor(pool, feed)
        with worker_processes(env, args.workers, logdir, concurrency=args.concurrency, name="benchfeedsnocp"):
            task_round(service, actions, celebrity, board, 1)
            bare_s = [cpu.costed("tasks_without_coprocessor",
                                 lambda: task_round(service, actions, celebrity, board, args.pins))()
                      for _ in range(args.rounds)]
    finally:
        for pool in pair:
            apply_table(pool, feed)
        pair.close()
    raw_rate = cells / statistics.median(raw_s)
    raw2_rate = cells / statistics.median(raw2_s)
    task_rate = cells / statistics.median(task_s)
    bare_rate = cells / statistics.median(bare_s)
    return {
        "followers": len(fans), "pins": args.pins, "cells_per_round": cells, "rounds": args.rounds,
        "cap": int(dict(feed.values)[TRIM_CAP_ATTRIBUTE]),
        "workers": args.workers, "concurrency": args.concurrency,
        "tasks_cells_per_s": task_rate, "raw_cells_per_s": raw_rate, "ratio": task_rate / raw_rate,
        "tasks_s": task_s, "raw_s": raw_s,
        "raw_thrift2_cells_per_s": raw2_rate, "raw_thrift2_s": raw2_s,
        "ratio_to_faster_raw": task_rate / max(raw_rate, raw2_rate),
        # The tasks with no trimming coprocessor (fan-out samples rows for trims).
        "tasks_without_coprocessor_cells_per_s": bare_rate, "tasks_without_coprocessor_s": bare_s,
        "coprocessor_speedup": task_rate / bare_rate,
        "tasks_write_jobs": write_jobs,
        "tasks_pages": (len(pages) + 1) * (args.pins * args.rounds + 1),
        # CPU seconds a round, per writer: the machine's, each server kind's, and
        # the rest ("clients": Celery workers, or the raw writers' processes).
        "cpu_s_per_round": cpu.mean(),
        # The same in µs a cell, and the tasks' machine CPU a cell against the
        # raw Thrift2 writer's (the fan-out's target: at most 1.5).
        "cpu_us_per_cell": cpu.mean(per=cells / 1e6),
        "cpu_per_cell_vs_raw_thrift2": cpu.mean()["tasks"]["machine"] / cpu.mean()["raw_thrift2"]["machine"],
    }


# ------------------------------------------------------------------ reads


class StallableRelay:
    """A TCP relay to ``target`` on 127.0.0.1; while stalled it forwards
    nothing in either direction (connections stay open, calls hang)."""

    def __init__(self, target: Address) -> None:
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = Address("127.0.0.1", self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.target.host, self.target.port))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                self.flowing.wait()
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.flowing.set()
        self.listener.close()


def read_phase(reader: FeedReader, users: list[int], rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: request i is due at start + i/rate; its latency counts from then."""
    rng = random.Random(5)
    picks = [rng.choice(users) for _ in range(int(rate * seconds))]
    before = cpu_snapshot()
    run = open_loop(lambda user: reader.read(user, None, 25).served_by, picks, rate)
    cpu_s = cpu_spent(before, cpu_snapshot())
    served: dict[str, int] = {}
    for _user, _latency, cluster in run.answered:
        served[cluster] = served.get(cluster, 0) + 1
    latencies = [latency for _user, latency, _cluster in run.answered]
    return {"requests": run.requests, "errors": run.errors, "served_by": served,
            "p50_ms": percentile_ms(latencies, 0.50), "p99_ms": percentile_ms(latencies, 0.99),
            "p999_ms": percentile_ms(latencies, 0.999), "max_ms": percentile_ms(latencies, 1.0),
            "cpu_s": cpu_s}


def read_bench(args: argparse.Namespace, store: AppData, pair: ClusterPair, hbase: HBaseSettings,
               settings: FeedSettings) -> dict[str, Any]:
    owner = graph.create_user(store, {"name": "bench pinner"}).id
    board = graph.create_board(store, owner, {"name": "bench"}).id
    pins = [graph.create_pin(store, owner, board, {"title": f"p{i}"}) for i in range(100)]
    users = [graph.create_user(store, {"name": f"reader {i}"}).id for i in range(args.readers)]
    # Feeds written directly (the fan-out is measured above): 100 pins per reader.
    for pin in pins:
        column = f"{FAMILY}:".encode() + qualifier(pin.created_at_ms, pin.id)
        for pool in pair:
            raw_put(str(pool.address), hbase.table_prefix, [users[i:i + 1000] for i in range(0, len(users), 1000)],
                    column, pin.created_at_ms)
    # Reads go through the Thrift2 server; both of the primary's ports are
    # relayed and stall together, as a hung region server stalls both.
    relay, relay2 = StallableRelay(hbase.primary), StallableRelay(hbase.primary_thrift2)
    relay2.flowing = relay.flowing
    through_relay = ClusterPair.from_settings(dataclasses.replace(
        hbase, primary=relay.address, primary_thrift2=relay2.address, pool_size=16, call_timeout_s=5.0))
    cutoff_s = settings.read_cutoff_ms / 1000
    reader = FeedReader(through_relay, store, cutoff_s, settings.shadow_share, threads=16)
    try:
        cold = read_phase(reader, users, args.read_rate, args.read_seconds)
        warm_up_s = warm_up(reader, users, args.warm_reads)
        up = read_phase(reader, users, args.read_rate, args.read_seconds)
        idle = idle_cpu(args.read_seconds)
        relay.flowing.clear()
        stalled = read_phase(reader, users, args.read_rate, args.read_seconds)
    finally:
        relay.close()
        relay2.close()
        reader.close()
        through_relay.close()
    return {"rate_per_s": args.read_rate, "seconds": args.read_seconds, "cutoff_ms": settings.read_cutoff_ms,
            "shadow_share": settings.shadow_share, "cold": cold, "warm_up_reads": args.warm_reads,
            "warm_up_s": warm_up_s, "up": up, "stalled": stalled,
            # The same span with no reads, after "up": the baseline of its cpu_s.
            "idle_cpu_s": idle}


def warm_up(reader: FeedReader, users: list[int], count: int) -> float:
    """``count`` reads as fast as 16 threads go: enough for servers just
    started to compile their read path (the JVM compiles a method fully
    after some ten thousand calls), as a region server that has served a
    while has. Returns the seconds it took."""
    rng = random.Random(7)
    picks = [rng.choice(users) for _ in range(count)]

    def read(user: int) -> None:
        # A cold primary passes the cut-off, so reads ask the standby too and
        # the reader sheds what its threads cannot hold: the warm-up only
        # needs the calls made, not every one answered.
        with suppress(FeedUnavailable):
            reader.read(user, None, 25)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as threads:
        list(threads.map(read, picks))
    return time.perf_counter() - started


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--followers", type=int, default=50_000)
    parser.add_argument("--pins", type=int, default=4, help="pins per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="pool processes per worker")
    parser.add_argument("--readers", type=int, default=2000)
    parser.add_argument("--read-rate", type=float, default=100.0)
    parser.add_argument("--read-seconds", type=float, default=10.0)
    parser.add_argument("--warm-reads", type=int, default=10_000, help="reads between the cold and measured phases")
    parser.add_argument("--cap", type=int, default=None,
                        help="feed cap (PINLATER_FEED_CAP and the table's): small, feeds pass it during the rounds")
    parser.add_argument("--trim-slack", type=int, default=None, help="PINLATER_FEED_TRIM_SLACK for the workers")
    parser.add_argument("--smoke", action="store_true", help="small and quick")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warn_of_quick_jit()
    if args.smoke:
        args.followers, args.pins, args.rounds, args.readers = 3000, 1, 1, 200
        args.read_rate, args.read_seconds, args.warm_reads = 50.0, 2.0, 300

    env = bench_env()
    if args.cap is not None:
        env["PINLATER_FEED_CAP"] = str(args.cap)
    if args.trim_slack is not None:
        env["PINLATER_FEED_TRIM_SLACK"] = str(args.trim_slack)
    feed = feed_table(FeedSettings.from_env(env).cap)
    for url in (SHARD_URL, CONTROL_URL):
        redis.Redis.from_url(url).flushdb()
    settings = Settings.from_env(env)
    store = AppData(AppDataSettings.from_env(env))
    hbase = HBaseSettings.from_env(env)
    pair = ClusterPair.from_settings(hbase)
    schema.drop_shards(store)
    schema.create_shards(store)
    for pool in pair:
        for table in installed_tables():  # made fresh with today's definitions, never an older run's
            drop_table(pool, table.name)
    ensure_tables(pair, [feed if t.name == feed.name else t for t in installed_tables()])
    with JobService.from_settings(settings, source="bench-feeds") as service:
        for name in queues.ALL:
            with suppress(QueueNotFound):
                service.create_queue(name, **queues.create_options(name))
        fanout = fanout_bench(args, env, service, store, hbase, feed)
    print(f"fan-out: {fanout['followers']:,} followers x {fanout['pins']} pins x 2 clusters = "
          f"{fanout['cells_per_round']:,} cells per round, {fanout['rounds']} round(s), feed cap {fanout['cap']}, "
          f"{fanout['workers']} workers x {fanout['concurrency']} processes")
    print(f"  tasks (Celery on PinLater): {fanout['tasks_cells_per_s']:,.0f} cells/s")
    print(f"  raw happybase batch puts:   {fanout['raw_cells_per_s']:,.0f} cells/s")
    print(f"  raw Thrift2 putMultiple:    {fanout['raw_thrift2_cells_per_s']:,.0f} cells/s (a timestamp per cell)")
    print(f"  ratio: {fanout['ratio']:.2f} of raw happybase, "
          f"{fanout['ratio_to_faster_raw']:.2f} of the faster raw writer")
    print(f"  tasks, no trimming coprocessor (pages sample rows for trims): "
          f"{fanout['tasks_without_coprocessor_cells_per_s']:,.0f} cells/s; "
          f"with it {fanout['coprocessor_speedup']:.2f}x that")
    print(f"  write jobs beside {fanout['tasks_pages']:,} fan-out pages (pages put their own cells while the "
          f"write queues run freely): {fanout['tasks_write_jobs']}")
    print("  CPU seconds a round (the machine's, then by process kind; clients = the rest):")
    for name, spent in fanout["cpu_s_per_round"].items():
        print(f"    {name:12} " + ", ".join(f"{kind} {value:.1f}" for kind, value in spent.items()))
    print("  CPU µs a cell:")
    for name, spent in fanout["cpu_us_per_cell"].items():
        print(f"    {name:12} " + ", ".join(f"{kind} {value:.1f}" for kind, value in spent.items()))
    print(f"  the tasks' machine CPU a cell: {fanout['cpu_per_cell_vs_raw_thrift2']:.2f}x the raw Thrift2 "
          "writer's (target 1.5)")
    reads = read_bench(args, store, pair, hbase, FeedSettings.from_env(env))
    print(f"reads: {reads['rate_per_s']:.0f}/s for {reads['seconds']:.0f} s, 25 pins a page, "
          f"cut-off {reads['cutoff_ms']:.0f} ms, shadow share {reads['shadow_share']}")
    print(f"  (a cold phase first, then {reads['warm_up_reads']:,} reads as fast as they go, "
          f"{reads['warm_up_s']:.0f} s, then the measured phases)")
    for phase in ("cold", "up", "stalled"):
        r = reads[phase]
        print(f"  primary {phase:8} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
              f"p99.9 {r['p999_ms']:7.1f} ms  served by {r['served_by']}  errors {r['errors']}")
    store.close()
    pair.close()
    write_json(args.json, {"fanout": fanout, "reads": reads})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
