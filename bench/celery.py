"""Celery on PinLater against stock Celery on Redis, Dramatiq and Huey.

The same workload through each, in one run: N no-op tasks published one
call at a time (``apply_async``, Dramatiq's ``send``, a Huey task call; in
10 rounds that take turns between the systems, so that load changes on a
shared machine hit them alike), then drained by each system's workers in
turn:

* Celery (on PinLater, and stock on the stock Redis broker): 2 worker
  processes ``celery worker -P solo``, late ACKs, prefetch multiplier 16
  (``--prefetch-multiplier``), no events, no Flower;
* Dramatiq on its Redis broker: ``dramatiq --processes 2 --threads 8``
  (which prefetches 2 x 8 = 16 messages per process by default);
* Huey on Redis: 2 consumers ``huey_consumer -k thread -w 8`` (2 processes
  x 8 threads, as Dramatiq), results off.

Prints the publish and drain rates of each, the ratios of Celery on PinLater
to stock Celery, and its drain rate against the faster of Dramatiq and Huey;
then Celery on PinLater's bulk publishes (``delay_many``, a ``group``) of N
tasks against its single publishes of N in the same rounds
(``bulk_vs_single``), and in those rounds Celery's floor: its own message
for each task and one Redis round trip carrying it, what a transport that
added nothing would cost (``celery_floor_per_s``, ``floor_vs_huey``,
``single_vs_floor``; ``publish_vs_huey`` from the first rounds).

    python bench/celery.py            # 20,000 tasks
    python bench/celery.py --smoke    # 1,000 tasks
    python bench/celery.py --json out.json
    python bench/celery.py --prefetch-multiplier 4   # Celery's default window

The prefetch window is 16 per process, not Celery's default of 4: it is the
window Dramatiq gives each of its processes here, and Celery's optimizing
guide advises a large multiplier for many short tasks. With 4, each solo
worker claims at most 4 jobs per round trip (docs/benchmarks.md has both).

Redis databases on 127.0.0.1:16379 (the local Redis of ``scripts/services``),
each flushed before its system runs: PinLater one shard in db 8 and its
control store in db 9, stock Celery db 7, Dramatiq db 11, Huey db 12.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This file is named celery.py: keep its directory off sys.path, or
# "import celery" would import it.
REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from bench.results import write_json  # noqa: E402

SHARD_URL = "redis://127.0.0.1:16379/8"
CONTROL_URL = "redis://127.0.0.1:16379/9"
STOCK_URL = "redis://127.0.0.1:16379/7"
DRAMATIQ_URL = "redis://127.0.0.1:16379/11"
HUEY_URL = "redis://127.0.0.1:16379/12"
QUEUE = "bench_noop"  # bench.celery_apps.QUEUE (imported late: it reads the environment)
PROCESSES = 2
PEER_THREADS = 8
# Drain is timed from the first 5% consumed to the end, so that worker
# start-up is not measured.
WARMUP_SHARE = 0.05
PUBLISH_ROUNDS = 10

Procs = list[subprocess.Popen[bytes]]


@dataclass(frozen=True)
class System:
    name: str
    workers: str  # how its workers run, for the printout
    reset: Callable[[], object]
    publish: Callable[[int], None]
    remaining: Callable[[], int]
    worker_commands: list[list[str]]
    # Bulk publishes (name -> publish ``count`` tasks at once), where the system has them.
    bulk: dict[str, Callable[[int], None]] | None = None
    # The floor of a single publish, where measured: ``count`` of them (see floor_publish).
    floor: Callable[[int], None] | None = None


def bench_env(prefetch_multiplier: int = 16) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PINLATER_SHARDS=f"b1={SHARD_URL}",
        PINLATER_CONTROL_URL=CONTROL_URL,
        PINLATER_BUS_PREFIX="bench:",
        BENCH_STOCK_BROKER=STOCK_URL,
        BENCH_DRAMATIQ_URL=DRAMATIQ_URL,
        BENCH_HUEY_URL=HUEY_URL,
        BENCH_PREFETCH_MULTIPLIER=str(prefetch_multiplier),
        PYTHONPATH=str(REPO),
    )
    env.pop("PINLATER_SERVERS", None)
    return env


def start_workers(commands: list[list[str]], env: dict[str, str], logs: Path) -> Procs:
    """The workers, each writing its output to ``logs/worker<i>.log``."""
    procs = []
    for i, command in enumerate(commands):
        with open(logs / f"worker{i}.log", "wb") as log:
            procs.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def exit_report(procs: Procs, logs: Path) -> str | None:
    """How the first worker that exited ended (its exit code and the end of
    its output); None while every worker runs."""
    for i, proc in enumerate(procs):
        if proc.poll() is not None:
            tail = (logs / f"worker{i}.log").read_text(errors="replace").strip().splitlines()[-15:]
            return f"worker {i} exited with code {proc.returncode}; its output ended:\n" + "\n".join(tail)
    return None


def stop_workers(procs: Procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def publish_all(systems: list[System], n: int) -> list[float]:
    """Publishes ``n`` tasks on each system, in PUBLISH_ROUNDS rounds whose
    order rotates, so that a change of load on a shared machine falls on
    every system alike; returns each system's publish time (s)."""
    for system in systems:
        system.reset()
    spent = [0.0] * len(systems)
    for round_ in range(PUBLISH_ROUNDS):
        count = n // PUBLISH_ROUNDS + (1 if round_ < n % PUBLISH_ROUNDS else 0)
        for k in range(len(systems)):
            i = (k + round_) % len(systems)
            t0 = time.perf_counter()
            systems[i].publish(count)
            spent[i] += time.perf_counter() - t0
    return spent


def drain(system: System, n: int, publish_s: float, env: dict[str, str]) -> dict[str, Any]:
    """Starts the system's workers on its ``n`` published tasks and times the drain."""
    logs = Path(tempfile.mkdtemp(prefix="bench-celery-"))
    procs = start_workers(system.worker_commands, env, logs)
    try:
        deadline = time.monotonic() + 60 + n / 50
        start_at = None
        start_left = 0
        seen_at, seen_left = time.perf_counter(), n
        while True:
            left = system.remaining()
            now = time.perf_counter()
            if start_at is None and left <= n * (1 - WARMUP_SHARE):
                # A fast peer can pass the warm-up share and finish between
                # two polls; it is then timed from the poll before, which
                # keeps the rate finite and counts a little warm-up.
                start_at, start_left = (now, left) if left else (seen_at, seen_left)
            if left == 0:
                break
            seen_at, seen_left = now, left
            exited = exit_report(procs, logs)
            if exited is not None:
                raise RuntimeError(f"{system.name}: a worker exited early ({left} tasks left): {exited}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{system.name}: {left} tasks left at the deadline")
            time.sleep(0.01)
        assert start_at is not None
        drain_s = now - start_at
    finally:
        stop_workers(procs)
        shutil.rmtree(logs, ignore_errors=True)
        system.reset()
    return {
        "system": system.name, "tasks": n, "workers": system.workers,
        "publish_per_s": n / publish_s, "drain_per_s": start_left / drain_s,
    }


def celery_workers(app_path: str) -> list[list[str]]:
    return [
        [sys.executable, "-m", "celery", "-A", app_path, "worker", "-P", "solo", "-Q", QUEUE,
         "-n", f"bench{i}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
        for i in range(PROCESSES)
    ]


def celery_pinlater(env: dict[str, str]) -> System:
    os.environ.update({k: env[k] for k in ("PINLATER_SHARDS", "PINLATER_CONTROL_URL", "PINLATER_BUS_PREFIX",
                                           "BENCH_PREFETCH_MULTIPLIER")})
    from celery import group

    from bench.celery_apps import pinlater_app, pinlater_noop
    from pinlater.service import JobService
    from pinlater.settings import Settings
    from workers.client import shared_client
    from workers.settings import TransportSettings

    client = shared_client(TransportSettings.from_options(pinlater_app.conf.broker_transport_options).pinlater)

    def reset() -> None:
        for url in (SHARD_URL, CONTROL_URL):
            redis.Redis.from_url(url).flushdb()
        # This process's client recorded the stores' layout on its first
        # command (its shard health probe, in the background), perhaps before
        # the flush, and records it once only: a fresh client's first calls
        # record it again, as on a new deployment, or the workers would
        # find the queue's keys without it and take the stores for layout 1.
        with JobService.from_settings(Settings.from_env(), source="bench-reset") as fresh:
            fresh.queue_names()
            fresh.operators.shard_status(probe=True)

    def publish(count: int) -> None:
        # Created by its first publish, as in an application.
        with pinlater_app.producer_or_acquire() as producer:
            for _ in range(count):
                pinlater_noop.apply_async(producer=producer)

    def remaining() -> int:
        return int(client.count(QUEUE, "pending") + client.count(QUEUE, "running"))

    def delay_many(count: int) -> None:
        pinlater_noop.delay_many([()] * count)

    def group_of(count: int) -> None:
        group(pinlater_noop.s() for _ in range(count)).apply_async()

    workers = f"{PROCESSES} solo, prefetch {env['BENCH_PREFETCH_MULTIPLIER']}"
    return System("celery+pinlater", workers, reset, publish, remaining,
                  celery_workers("bench.celery_apps:pinlater_app"),
                  bulk={"delay_many": delay_many, "group": group_of},
                  floor=lambda count: floor_publish(pinlater_noop, count))


FLOOR_KEY = "bench:floor"


def floor_publish(task: Any, count: int) -> None:
    """What any publish through Celery costs at least, ``count`` times: the
    task's message as Celery makes it (its id, ``as_task_v2``, the JSON
    body), the envelope Kombu's Redis transport stores (JSON), one Redis
    round trip carrying it (an LPUSH, as Huey's publish is), and the result
    object ``apply_async`` returns. No routing, options, retry policy or
    job: a transport that added nothing to Celery could reach this."""
    from celery.utils import uuid
    from kombu.serialization import dumps
    from kombu.utils.json import dumps as json_dumps

    amqp = task.app.amqp
    r = redis.Redis.from_url(SHARD_URL)
    for _ in range(count):
        task_id = uuid()
        headers, properties, body, _ = amqp.as_task_v2(task_id, task.name, (), {}, argsrepr="()", kwargsrepr="{}")
        content_type, encoding, data = dumps(body, serializer="json")  # type: ignore[no-untyped-call]
        envelope = {"body": data, "content-encoding": encoding, "content-type": content_type, "headers": headers,
                    "properties": properties}
        r.lpush(FLOOR_KEY, json_dumps(envelope))  # type: ignore[no-untyped-call]
        task.AsyncResult(task_id)
    r.delete(FLOOR_KEY)


def celery_stock(env: dict[str, str]) -> System:
    os.environ["BENCH_STOCK_BROKER"] = STOCK_URL
    os.environ["BENCH_PREFETCH_MULTIPLIER"] = env["BENCH_PREFETCH_MULTIPLIER"]
    from bench.celery_apps import stock_app, stock_noop

    r = redis.Redis.from_url(STOCK_URL)

    def publish(count: int) -> None:
        with stock_app.producer_or_acquire() as producer:
            for _ in range(count):
                stock_noop.apply_async(producer=producer)

    def remaining() -> int:
        return int(r.llen(QUEUE) + r.hlen("unacked"))

    workers = f"{PROCESSES} solo, prefetch {env['BENCH_PREFETCH_MULTIPLIER']}"
    return System("celery+redis", workers, r.flushdb, publish, remaining,
                  celery_workers("bench.celery_apps:stock_app"))


def dramatiq_redis(env: dict[str, str]) -> System:
    os.environ["BENCH_DRAMATIQ_URL"] = DRAMATIQ_URL
    from bench import peer_dramatiq

    def publish(count: int) -> None:
        for _ in range(count):
            peer_dramatiq.noop.send()

    command = [sys.executable, "-m", "dramatiq", "bench.peer_dramatiq", "--processes", str(PROCESSES),
               "--threads", str(PEER_THREADS), "--queues", QUEUE]
    return System("dramatiq+redis", f"{PROCESSES}x{PEER_THREADS} threads", peer_dramatiq.broker.client.flushdb,
                  publish, peer_dramatiq.remaining, [command])


def huey_redis(env: dict[str, str]) -> System:
    os.environ["BENCH_HUEY_URL"] = HUEY_URL
    from bench import peer_huey

    def publish(count: int) -> None:
        for _ in range(count):
            peer_huey.noop()

    command = [sys.executable, "-m", "huey.bin.huey_consumer", "bench.peer_huey.huey", "-k", "thread",
               "-w", str(PEER_THREADS), "-n", "-q"]
    return System("huey+redis", f"{PROCESSES}x{PEER_THREADS} threads", peer_huey.huey.storage.conn.flushdb,
                  publish, peer_huey.remaining, [command] * PROCESSES)


SYSTEMS = (celery_pinlater, celery_stock, dramatiq_redis, huey_redis)


def bulk_publish(system: System, n: int) -> dict[str, float]:
    """Each of the system's bulk publishes of ``n`` tasks at once, against
    the same run's single publishes of ``n`` one call each (the same task,
    nothing consuming): tasks/s of each. Rounds take turns as publish_all's."""
    assert system.bulk is not None
    extra = {"floor": system.floor} if system.floor is not None else {}
    spent = {"single": 0.0, **dict.fromkeys(system.bulk, 0.0), **dict.fromkeys(extra, 0.0)}
    system.reset()
    for round_ in range(PUBLISH_ROUNDS):
        count = n // PUBLISH_ROUNDS + (1 if round_ < n % PUBLISH_ROUNDS else 0)
        ways = [("single", system.publish), *system.bulk.items(), *extra.items()]
        for k in range(len(ways)):
            name, way = ways[(k + round_) % len(ways)]
            t0 = time.perf_counter()
            way(count)
            spent[name] += time.perf_counter() - t0
    system.reset()
    return {name: n / s for name, s in spent.items()}


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_name = {r["system"]: r for r in rows}
    ours, stock = by_name["celery+pinlater"], by_name["celery+redis"]
    fastest_peer = max((by_name["dramatiq+redis"], by_name["huey+redis"]), key=lambda r: r["drain_per_s"])
    return {
        "results": rows,
        "publish_ratio": ours["publish_per_s"] / stock["publish_per_s"],
        "drain_ratio": ours["drain_per_s"] / stock["drain_per_s"],
        "fastest_peer": fastest_peer["system"],
        "peer_drain_ratio": ours["drain_per_s"] / fastest_peer["drain_per_s"],
    }


def floor_summary(rows: list[dict[str, Any]], single_per_s: float, floor_per_s: float) -> dict[str, Any]:
    """Single publishes against Huey's (the first publish rounds) and the
    floor (``floor_publish``, timed in the bulk rounds beside single
    publishes): how far from Huey any Celery transport would be."""
    huey = next(r for r in rows if r["system"] == "huey+redis")["publish_per_s"]
    ours = next(r for r in rows if r["system"] == "celery+pinlater")["publish_per_s"]
    floor = round(floor_per_s)  # as printed: its ratio is the printed rates'
    return {
        "publish_vs_huey": round(ours / huey, 2),
        "celery_floor_per_s": floor,
        "floor_vs_huey": round(floor / huey, 2),
        "single_vs_floor": round(single_per_s / floor_per_s, 2),
    }


def print_report(summary: dict[str, Any]) -> None:
    print(f"{'system':<16} {'publish/s':>10} {'drain/s':>10}   workers")
    for row in summary["results"]:
        print(f"{row['system']:<16} {row['publish_per_s']:>10.0f} {row['drain_per_s']:>10.0f}   "
              f"{row['workers']} ({row['tasks']} no-op tasks)")
    print(f"celery+pinlater / celery+redis: publish {summary['publish_ratio']:.2f}, "
          f"drain {summary['drain_ratio']:.2f}")
    print(f"celery+pinlater drain / fastest peer ({summary['fastest_peer']}): {summary['peer_drain_ratio']:.2f}")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected 1 to 65535, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="1,000 tasks")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--prefetch-multiplier", type=positive, default=16,
                        help="Celery's worker_prefetch_multiplier for both Celery systems (default 16)")
    args = parser.parse_args(argv)
    n = args.tasks or (1000 if args.smoke else 20_000)
    env = bench_env(args.prefetch_multiplier)
    if os.environ.get("PINLATER_TEST_SERVICES_STARTED") not in ("core", "all"):
        subprocess.run([str(REPO / "scripts" / "services"), "up-core"], check=True, capture_output=True)
    systems = [make(env) for make in SYSTEMS]
    publish_s = publish_all(systems, n)
    rows = [drain(system, n, spent, env) for system, spent in zip(systems, publish_s, strict=True)]
    summary = report(rows)
    summary["prefetch_multiplier"] = args.prefetch_multiplier
    bulk = bulk_publish(systems[0], n)
    floor = bulk.pop("floor")
    summary["bulk_publish_per_s"] = {name: round(rate) for name, rate in bulk.items() if name != "single"}
    summary["bulk_vs_single"] = {name: round(rate / bulk["single"], 2) for name, rate in bulk.items()
                                 if name != "single"}
    summary.update(floor_summary(rows, bulk["single"], floor))
    print_report(summary)
    print(f"celery+pinlater bulk publish: {bulk['single']:.0f} tasks/s one call each; "
          + "; ".join(f"{name} {summary['bulk_publish_per_s'][name]}/s ({summary['bulk_vs_single'][name]:.2f}x)"
                      for name in summary["bulk_vs_single"]))
    print(f"single publish / huey+redis: {summary['publish_vs_huey']:.2f}; Celery's floor (its message and one "
          f"round trip) {summary['celery_floor_per_s']}/s, {summary['floor_vs_huey']:.2f} of huey+redis; "
          f"single publish / floor: {summary['single_vs_floor']:.2f}")
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
