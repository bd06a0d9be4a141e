"""The capacity model: what a unit of work costs each kind of process, in
core-microseconds, measured here; and the hosts a target load needs.

    python bench/capacity.py measure [--feeds FILE] [--typeahead FILE] [--json FILE] [--smoke]
    python bench/capacity.py plan [--costs FILE] --jobs 10000 --pins 1000 --followers 1000 \\
        --feed-reads 20000 --lookups 5000 [--host-cores 16] [--utilisation 0.6]
    python bench/capacity.py check [--host-cores 0.25] [--seconds 20] [--json FILE] [--smoke]

``measure`` runs the job lifecycle itself (enqueue, dequeue and ACK in
batches of 100 through the in-process client, on a Redis shard and on a
MySQL one) and takes
the other units from the ``--json`` reports of ``bench/feeds.py`` (a fan-out
cell written to both clusters, a feed read of 25 pins) and
``bench/typeahead.py`` (a lookup), each of which splits the machine's CPU
by kind of process (``bench.support.cpu_snapshot``). It writes
``{"units": {UNIT: {KIND: core_us}}, ...}``; ``bench/capacity-costs.json``
is the committed run ``plan`` uses by default.

``plan`` multiplies each unit's rate by its costs, sums by kind, and turns
cores into hosts: ``ceil(cores / (host cores x utilisation)) + 1`` for a
failure, with the single-threaded Redis held to one core a shard. See
docs/capacity.md.

``check`` tests the model at two sizes on the topology harness (network
namespaces, tests/support/topology; root): a Redis shard on a host of its
own, and one worker host, then two, each held to ``--host-cores`` of a core
by a CPU quota, running the job lifecycle flat out. The model says a worker
host does ``host cores / (clients' core-µs a job)`` jobs a second, the cost
measured in the same run by the same lifecycle on a host without a quota,
and two do twice that; it prints what each size did against it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results import write_json  # noqa: E402
from bench.support import cpu_snapshot, cpu_spent  # noqa: E402
from bench.workloads import drain_all, enqueue_all  # noqa: E402

COSTS = REPO / "bench" / "capacity-costs.json"
BATCH = 100
JOB_KINDS = ("machine", "redis", "mariadb", "clients")
NEGLIGIBLE_CORES = 0.05
# Which kind of host each kind of process runs on (docs/capacity.md).
ROLES = {
    "redis": "redis shards",
    "mariadb": "mysql shards",
    "hbase_region_server": "hbase region servers",
    "hbase_thrift1": "hbase region servers",  # the Thrift gateways run beside the region servers
    "hbase_thrift2": "hbase region servers",
    "clients": "workers",  # Celery workers, the job service's clients, app servers' readers
}
# Bytes a pending job holds in Redis (bench/redis_memory.py: 100-byte bodies).
PENDING_JOB_BYTES = 284


def _per_unit(spent: dict[str, float], units: int, idle: dict[str, float] | None = None,
              idle_share: float = 1.0) -> dict[str, float]:
    """Core-µs per unit of each kind (the machine's total as ``machine``),
    less ``idle_share`` of an idle span's CPU (what the processes spend with
    no load: at a light rate it would be most of a phase's)."""
    idle = idle or {}
    per = {kind: (seconds - idle_share * idle.get(kind, 0.0)) * 1e6 / units for kind, seconds in spent.items()
           if kind != "steal"}
    return {kind: round(us, 1) for kind, us in per.items() if us > 0 or kind == "machine"}


def measure_jobs(backend: str, jobs: int) -> dict[str, float]:
    """The job lifecycle on a shard of its own, Redis (dbs 10 and 13 of the
    services' Redis, or of ``PINLATER_BENCH_REDIS``, flushed first) or
    MySQL (database ``pinlater_capacity``, dropped first; its control store
    on Redis): core-µs per job, enqueue and dequeue+ACK together."""
    import pymysql
    import redis

    from pinlater import JobService, Settings
    from pinlater.settings import parse_shards

    base = os.environ.get("PINLATER_BENCH_REDIS", "redis://127.0.0.1:16379")
    # Dbs no other benchmark uses: make test runs the benchmarks' smokes side
    # by side, and this one flushes its dbs first.
    shard, control = f"{base}/10", f"{base}/13"
    for url in (shard, control):
        redis.Redis.from_url(url).flushdb()
    if backend == "mysql":
        conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS pinlater_capacity")
        conn.close()
        shard = "mysql://pinlater:pinlater@127.0.0.1:13306/pinlater_capacity"
    settings = Settings(shards=parse_shards(f"s1={shard}"), control_url=control)
    queue = "capacity"
    with JobService.from_settings(settings, source=f"capacity-{os.getpid()}") as client:
        client.create_queue(queue)
        enqueue_all(client, queue, 1000, BATCH)  # warm: connections, scripts
        drain_all(client, queue, 1000, BATCH)
        before = cpu_snapshot()
        enqueue_all(client, queue, jobs, BATCH)
        got = drain_all(client, queue, jobs, BATCH)
        spent = cpu_spent(before, cpu_snapshot())
    if got != jobs:
        raise SystemExit(f"error: drained {got} of {jobs} jobs")
    # Only the stores and this process work for a job: what HBase's idle
    # chores spent meanwhile is not a job's.
    return _per_unit({kind: s for kind, s in spent.items() if kind in JOB_KINDS}, jobs)


def from_feeds(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    fanout, reads = report["fanout"], report["reads"]
    idle = reads["idle_cpu_s"]
    # The idle span lasted a read phase; a fan-out round lasted its median.
    round_share = statistics.median(fanout["tasks_s"]) / reads["seconds"]
    units = {"fanout_cell": _per_unit(fanout["cpu_s_per_round"]["tasks"], fanout["cells_per_round"], idle,
                                      round_share)}
    up = reads["up"]
    units["feed_read"] = _per_unit(up["cpu_s"], up["requests"] - up["errors"], idle)
    return units


def from_typeahead(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    lookups = report["lookups"]
    phase = lookups["users"]
    return {"lookup": _per_unit(phase["cpu_s"], phase["answered"], lookups["idle_cpu_s"])}


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cores": os.cpu_count(), "cpu": model, "python": platform.python_version()}


def run_measure(args: argparse.Namespace) -> None:
    jobs = 5_000 if args.smoke else 100_000
    started = time.perf_counter()
    units: dict[str, dict[str, float]] = {"job": measure_jobs("redis", jobs),
                                          "job_mysql": measure_jobs("mysql", jobs // 2)}
    if args.feeds:
        units.update(from_feeds(json.loads(args.feeds.read_text())))
    if args.typeahead:
        units.update(from_typeahead(json.loads(args.typeahead.read_text())))
    result = {"measured": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(), "jobs": jobs,
              "units": units, "seconds": round(time.perf_counter() - started, 1)}
    for unit, costs in units.items():
        print(f"{unit:12} " + ", ".join(f"{kind} {us:,.1f}" for kind, us in costs.items()) + " core-µs")
    write_json(args.json, result)


def plan(costs: dict[str, dict[str, float]], rates: dict[str, float], host_cores: int,
         utilisation: float) -> dict[str, Any]:
    """Cores by kind of process and hosts by role for ``rates`` (units a
    second); a unit without a measured cost is refused by name."""
    missing = sorted(unit for unit, rate in rates.items() if rate > 0 and unit not in costs)
    if missing:
        raise SystemExit(f"error: no measured cost for {', '.join(missing)}: run `bench/capacity.py measure` "
                         "with the benchmark reports that measure them")
    cores: dict[str, float] = {}
    for unit, rate in rates.items():
        for kind, us in costs.get(unit, {}).items():
            if kind != "machine":
                cores[kind] = cores.get(kind, 0.0) + rate * us / 1e6
    usable = host_cores * utilisation
    roles: dict[str, dict[str, Any]] = {}
    for kind, need in cores.items():
        role = roles.setdefault(ROLES.get(kind, kind), {"cores": 0.0})
        role["cores"] += need
    for name, role in list(roles.items()):
        role["cores"] = round(role["cores"], 2)
        if role["cores"] < NEGLIGIBLE_CORES:  # a measurement's noise, not a role the load needs
            del roles[name]
            continue
        hosts = math.ceil(role["cores"] / usable)
        if name == "redis shards":
            # One Redis server uses one core: shards, not hosts, are the unit.
            role["shards"] = max(1, math.ceil(role["cores"] / utilisation))
            hosts = math.ceil(role["shards"] / max(1, int(usable)))
        role["hosts"] = hosts + 1  # one more, for a failure
    return {"rates": rates, "host_cores": host_cores, "utilisation": utilisation, "cores": {
        k: round(v, 2) for k, v in sorted(cores.items())}, "roles": roles,
        "total_hosts": sum(role["hosts"] for role in roles.values())}


def run_client(args: argparse.Namespace) -> None:
    """One worker host's share of ``check``: the lifecycle in batches until
    ``--seconds`` pass, then one JSON line of jobs, seconds and CPU."""
    from pinlater import JobService, Settings
    from pinlater.settings import parse_shards

    settings = Settings(shards=parse_shards(f"s1={args.redis}/0"), control_url=f"{args.redis}/1")
    with JobService.from_settings(settings, source=f"capacity-{os.getpid()}") as client:
        client.create_queue(args.queue)
        enqueue_all(client, args.queue, 1000, BATCH)  # warm: connections, scripts
        drain_all(client, args.queue, 1000, BATCH)
        jobs = 0
        cpu0, started = time.process_time(), time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            enqueue_all(client, args.queue, BATCH * 10, BATCH)
            jobs += drain_all(client, args.queue, BATCH * 10, BATCH)
        print(json.dumps({"jobs": jobs, "seconds": time.perf_counter() - started,
                          "cpu_s": time.process_time() - cpu0}), flush=True)


def run_check(args: argparse.Namespace) -> None:
    from tests.support.topology import Topology

    committed = json.loads(args.costs.read_text())["units"]["job"]["clients"]
    seconds = 3.0 if args.smoke else args.seconds
    workers = ("w1", "w2")
    result: dict[str, Any] = {"host_cores": args.host_cores, "seconds": seconds,
                              "committed_clients_core_us_per_job": committed, "sizes": {}}
    # w0 has no quota: the cost a job has for its client, measured in the
    # same run and the same way as the capped hosts run (the machine's speed
    # drifts from day to day; the committed cost is reported beside it).
    with Topology(["redis", "w0", *workers], cpu={name: args.host_cores for name in workers}) as topo:
        address = topo.address("redis")
        topo.spawn("redis", ["redis-server", "--bind", address, "--port", "6379", "--save", "", "--appendonly", "no",
                             "--protected-mode", "no"], stdout=subprocess.DEVNULL)
        url = f"redis://{address}:6379"
        deadline = time.monotonic() + 10
        while True:
            try:
                with topo.connect(workers[0], (address, 6379), timeout_s=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("error: the topology's Redis did not answer within 10 s") from None
                time.sleep(0.1)
        def run(hosts: tuple[str, ...]) -> list[dict[str, float]]:
            clients = [topo.spawn(host, [sys.executable, str(Path(__file__).resolve()), "client", "--redis", url,
                                         "--queue", f"check_{host}", "--seconds", str(seconds)],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO) for host in hosts]
            reports = []
            for client in clients:
                out, _ = client.communicate(timeout=seconds + 120)
                if client.returncode != 0:
                    raise SystemExit(f"error: a worker host's client exited {client.returncode}")
                reports.append(json.loads(out.strip().splitlines()[-1]))
            return reports

        (free,) = run(("w0",))
        client_us = round(free["cpu_s"] * 1e6 / free["jobs"], 1)
        per_host = args.host_cores * 1e6 / client_us
        result["clients_core_us_per_job"] = client_us
        print(f"a job costs its client {client_us:g} core-µs, measured on a host without a quota "
              f"({committed:g} in {args.costs.name})", flush=True)
        for size in (1, 2):
            reports = run(workers[:size])
            rate = sum(r["jobs"] / r["seconds"] for r in reports)
            model = per_host * size
            result["sizes"][str(size)] = {
                "jobs_per_s": round(rate), "model_jobs_per_s": round(model),
                "measured_over_model": round(rate / model, 2),
                "client_cores": round(sum(r["cpu_s"] / r["seconds"] for r in reports), 3)}
            print(f"{size} worker host{'s' if size > 1 else ''} of {args.host_cores:g} core: {rate:,.0f} jobs/s, "
                  f"the model {model:,.0f} ({rate / model:.2f} of it)", flush=True)
    one, two = (result["sizes"][k]["jobs_per_s"] for k in ("1", "2"))
    result["doubling"] = round(two / one, 2) if one else None
    print(f"two worker hosts did {result['doubling']}x one; the model says 2x", flush=True)
    write_json(args.json, result)


def run_plan(args: argparse.Namespace) -> None:
    measured = json.loads(args.costs.read_text())
    # A pin reaches each follower's feed in both clusters: two cells.
    rates = {"job": args.jobs, "job_mysql": args.mysql_jobs, "fanout_cell": 2 * args.pins * args.followers,
             "feed_read": args.feed_reads, "lookup": args.lookups}
    result = plan(measured["units"], rates, args.host_cores, args.utilisation)
    result["costs_measured"] = {"date": measured["measured"], "machine": measured["machine"]}
    print(f"costs measured {measured['measured']} on {measured['machine']['cores']} cores "
          f"({measured['machine']['cpu']})")
    print(f"load: {args.jobs:,.0f} jobs/s, {args.pins:,.0f} pins/s x {args.followers:,.0f} followers "
          f"({rates['fanout_cell']:,.0f} cells/s), {args.feed_reads:,.0f} feed reads/s, {args.lookups:,.0f} lookups/s")
    for name, role in sorted(result["roles"].items()):
        extra = f", {role['shards']} shard{'s' if role['shards'] > 1 else ''}" if "shards" in role else ""
        print(f"  {name:22} {role['cores']:9,.1f} cores -> {role['hosts']:4} hosts of {args.host_cores} cores"
              f"{extra}")
    print(f"  {'total':22} {'':9}          {result['total_hosts']:4} hosts (at {args.utilisation:.0%} busy, "
          "each role one host over for a failure)")
    backlog = args.jobs * args.backlog_minutes * 60 * PENDING_JOB_BYTES
    result["backlog_bytes"] = backlog
    if backlog:
        print(f"  a {args.backlog_minutes:g}-minute backlog of {args.jobs:,.0f} jobs/s: {backlog / 2**30:,.1f} GiB of "
              f"Redis memory ({PENDING_JOB_BYTES} B a pending job of 100 B)")
    write_json(args.json, result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="measure the costs per unit of work on this machine")
    m.add_argument("--feeds", type=Path, help="bench/feeds.py --json report (fan-out cells, feed reads)")
    m.add_argument("--typeahead", type=Path, help="bench/typeahead.py --json report (lookups)")
    m.add_argument("--smoke", action="store_true", help="few jobs (CI)")
    m.add_argument("--json", type=Path)
    p = sub.add_parser("plan", help="hosts for a target load")
    p.add_argument("--costs", type=Path, default=COSTS)
    p.add_argument("--jobs", type=float, default=0.0, help="jobs/s through the job service on Redis")
    p.add_argument("--mysql-jobs", type=float, default=0.0, help="jobs/s through the job service on MySQL")
    p.add_argument("--pins", type=float, default=0.0, help="pins/s fanned out")
    p.add_argument("--followers", type=float, default=0.0, help="mean followers a pin is fanned out to")
    p.add_argument("--feed-reads", type=float, default=0.0, help="feed reads/s")
    p.add_argument("--lookups", type=float, default=0.0, help="typeahead lookups/s")
    p.add_argument("--host-cores", type=int, default=16)
    p.add_argument("--utilisation", type=float, default=0.6, help="the share of a host's cores to plan for")
    p.add_argument("--backlog-minutes", type=float, default=10.0)
    p.add_argument("--json", type=Path)
    c = sub.add_parser("check", help="the model against one and two CPU-capped worker hosts (root)")
    c.add_argument("--costs", type=Path, default=COSTS)
    c.add_argument("--host-cores", type=float, default=0.25, help="each worker host's share of a core")
    c.add_argument("--seconds", type=float, default=20.0, help="how long each size runs")
    c.add_argument("--smoke", action="store_true", help="3 s a size (CI)")
    c.add_argument("--json", type=Path)
    w = sub.add_parser("client", help=argparse.SUPPRESS)
    w.add_argument("--redis", required=True)
    w.add_argument("--queue", required=True)
    w.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()
    if args.command == "check":
        if not 0.05 <= args.host_cores <= 1 or not 1 <= args.seconds <= 600:
            parser.error("--host-cores must be 0.05 to 1, --seconds 1 to 600")
        run_check(args)
    elif args.command == "client":
        run_client(args)
    elif args.command == "plan":
        bad = [name for name in ("jobs", "mysql_jobs", "pins", "followers", "feed_reads", "lookups", "backlog_minutes")
               if not 0 <= getattr(args, name) < 1e12]
        if bad or not 0 < args.utilisation <= 1 or not 1 <= args.host_cores <= 4096:
            parser.error("rates must be 0 to 1e12, --utilisation in (0, 1], --host-cores 1 to 4096")
        run_plan(args)
    else:
        run_measure(args)


if __name__ == "__main__":
    main()
