"""Celery on PinLater against stock Celery on the stock Redis broker.

The same workload through both, in one run: N no-op tasks published with
``apply_async``, then drained by 2 worker processes (``celery worker -P solo``,
late ACKs, prefetch multiplier 4, no events, no Flower). Prints the publish
and drain rates of each and their ratio (PinLater / stock).

    python bench/celery.py            # 20,000 tasks
    python bench/celery.py --smoke    # 1,000 tasks, a few seconds
    python bench/celery.py --json out.json

PinLater runs on its Redis backend (one shard, db 8, control db 9); stock
Celery on redis://127.0.0.1:16379/7. Both on the local Redis of
``scripts/services``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# This file is named celery.py: keep its directory off sys.path, or
# "import celery" would import it.
REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

SHARD_URL = "redis://127.0.0.1:16379/8"
CONTROL_URL = "redis://127.0.0.1:16379/9"
STOCK_URL = "redis://127.0.0.1:16379/7"
WORKERS = 2
# Drain is timed from the first 5% consumed to the end, so that worker
# start-up (the same for both) is not measured.
WARMUP_SHARE = 0.05


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PINLATER_SHARDS=f"b1={SHARD_URL}",
        PINLATER_CONTROL_URL=CONTROL_URL,
        PINLATER_BUS_PREFIX="bench:",
        BENCH_STOCK_BROKER=STOCK_URL,
        PYTHONPATH=str(REPO),
    )
    return env


def start_workers(app_path: str, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app_path, "worker", "-P", "solo", "-Q", "bench_noop",
             "-n", f"bench{i}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-l", "warning"],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        for i in range(WORKERS)
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def measure(name: str, publish: Any, remaining: Any, app_path: str, n: int, env: dict[str, str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    publish(n)
    publish_s = time.perf_counter() - t0
    procs = start_workers(app_path, env)
    try:
        deadline = time.monotonic() + 60 + n / 50
        start_at = None
        start_left = 0
        while True:
            left = remaining()
            now = time.perf_counter()
            if start_at is None and left <= n * (1 - WARMUP_SHARE):
                start_at, start_left = now, left
            if left == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: {left} tasks left at the deadline")
            time.sleep(0.01)
        assert start_at is not None
        drain_s = now - start_at
    finally:
        stop_workers(procs)
    return {
        "system": name, "tasks": n, "workers": WORKERS,
        "publish_per_s": n / publish_s, "drain_per_s": start_left / drain_s if drain_s > 0 else float("inf"),
    }


def run_pinlater(n: int, env: dict[str, str]) -> dict[str, Any]:
    os.environ.update({k: env[k] for k in ("PINLATER_SHARDS", "PINLATER_CONTROL_URL", "PINLATER_BUS_PREFIX")})
    from bench.celery_apps import QUEUE, pinlater_app, pinlater_noop
    from workers.client import shared_client
    from workers.settings import TransportSettings

    for url in (SHARD_URL, CONTROL_URL):
        redis.Redis.from_url(url).flushdb()
    client = shared_client(TransportSettings.from_options(pinlater_app.conf.broker_transport_options).pinlater)
    client.create_queue(QUEUE)

    def publish(count: int) -> None:
        with pinlater_app.producer_or_acquire() as producer:
            for _ in range(count):
                pinlater_noop.apply_async(producer=producer)

    def remaining() -> int:
        return int(client.count(QUEUE, "pending") + client.count(QUEUE, "running"))

    return measure("celery+pinlater", publish, remaining, "bench.celery_apps:pinlater_app", n, env)


def run_stock(n: int, env: dict[str, str]) -> dict[str, Any]:
    os.environ["BENCH_STOCK_BROKER"] = STOCK_URL
    from bench.celery_apps import QUEUE, stock_app, stock_noop

    r = redis.Redis.from_url(STOCK_URL)
    r.flushdb()

    def publish(count: int) -> None:
        with stock_app.producer_or_acquire() as producer:
            for _ in range(count):
                stock_noop.apply_async(producer=producer)

    def remaining() -> int:
        return int(r.llen(QUEUE) + r.hlen("unacked"))

    return measure("celery+redis", publish, remaining, "bench.celery_apps:stock_app", n, env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="1,000 tasks: a few seconds")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    n = args.tasks or (1000 if args.smoke else 20_000)
    env = bench_env()
    subprocess.run([str(REPO / "scripts" / "services"), "up"], check=True, capture_output=True)
    ours = run_pinlater(n, env)
    stock = run_stock(n, env)
    ratio = ours["drain_per_s"] / stock["drain_per_s"]
    for row in (ours, stock):
        print(f"{row['system']:<16} publish {row['publish_per_s']:8.0f}/s   drain {row['drain_per_s']:8.0f}/s "
              f"({row['tasks']} no-op tasks, {row['workers']} solo workers)")
    print(f"drain ratio (pinlater / stock redis): {ratio:.2f}   "
          f"publish ratio: {ours['publish_per_s'] / stock['publish_per_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"results": [ours, stock], "drain_ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
