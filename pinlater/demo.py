"""The demo: a few thousand jobs through a cluster of Redis and MySQL shards.

Enqueues jobs across queues and priorities (some scheduled for later, some
that fail), works them with a small worker loop under a progress bar,
abandons a few claims as a crashed worker would, lets the monitor return
them, and prints the counts by state per queue.

    python -m pinlater.demo            # uses the local services (make demo)
"""

from __future__ import annotations

import argparse
import os
import random
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pinlater import Ack, Job, JobService, RetryPolicy, Settings
from pinlater.errors import DequeueRateLimited
from pinlater.kit.envsettings import read
from pinlater.operators import Monitor
from pinlater.settings import hash_secret, parse_shards, parse_store_url
from pinlater.stores.migrations import migrate

DEMO_SHARDS = (
    "r1=redis://127.0.0.1:16379/0,r2=redis://127.0.0.1:16380/0,"
    "d1=mysql://pinlater:pinlater@127.0.0.1:13306/pinlater_demo_d1"
)
DEMO_SECRET = "demo-only-secret"
QUEUES = {
    # name: (retry policy, claim timeout ms)
    "fanout_pin": (RetryPolicy.constant(300, retries=2), 1500),
    "send_email": (RetryPolicy.linear(200, retries=3), 1500),
    "trim_feed": (RetryPolicy.exponential(100, retries=2), 1500),
}


def demo_settings() -> Settings:
    # The job service's own variables, read the same way, with the demo's defaults.
    return Settings(
        shards=read(os.environ, "PINLATER_SHARDS", parse_shards, parse_shards(DEMO_SHARDS)),
        control_url=read(os.environ, "PINLATER_CONTROL_URL", parse_store_url, "redis://127.0.0.1:16379/0"),
        admin_secret_sha256=hash_secret(DEMO_SECRET),
    )


def make_jobs(count: int, now_ms: int, rng: random.Random) -> list[Job]:
    jobs = []
    for i in range(count):
        kind = rng.choices(["ok", "flaky", "broken"], weights=[90, 8, 2])[0]
        run_after = now_ms + rng.randint(1000, 4000) if rng.random() < 0.1 else None
        jobs.append(Job(f"{kind}:{i}".encode(), priority=rng.randint(1, 3), run_after_ms=run_after))
    return jobs


def migrate_demo_stores() -> None:
    """Bring the demo's stores to this code's layout: they may be left on
    this machine by an older PinLater, and a demo starts clean."""
    migrate(demo_settings(), dry_run=False, say=lambda _line: None)


def run_job(body: bytes, attempts_allowed: int, attempts_remaining: int) -> bool:
    """The demo's job logic: "flaky" jobs fail their first attempt, "broken" ones always."""
    kind = body.split(b":", 1)[0]
    if kind == b"broken":
        return False
    return not (kind == b"flaky" and attempts_remaining == attempts_allowed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per run, spread over the queues")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    console = Console()
    rng = random.Random(7)

    migrate_demo_stores()
    with JobService.from_settings(demo_settings(), source="demo-worker") as client:
        console.print(f"[bold]PinLater demo[/] on shards {', '.join(client.operators.shard_ids())}")
        for name, (policy, timeout_ms) in QUEUES.items():
            client.delete_queue(name, DEMO_SECRET)  # a clean slate each run
            client.create_queue(name, retry=policy, claim_timeout_ms=timeout_ms)

        now = client.operators.shard_now_ms()
        total = 0
        per_queue = args.jobs // len(QUEUES)
        for name in QUEUES:
            for start in range(0, per_queue, 100):
                client.enqueue(name, make_jobs(min(100, per_queue - start), now, rng))
            total += per_queue
        console.print(f"enqueued {total} jobs over {len(QUEUES)} queues (10% scheduled 1-4 s ahead)")

        # A worker that crashes holding 30 claims: the monitor must return them.
        abandoned = client.dequeue("send_email", 30, source="crashed-worker")
        console.print(f"a 'crashed' worker abandoned {len(abandoned)} claims (claim timeout 1.5 s)")

        monitor = Monitor(client.operators)
        monitor_totals = {"claims_repended": 0, "claims_failed": 0}
        deadline = time.monotonic() + args.timeout
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("jobs finished", total=total)
            last_monitor = float("-inf")
            while time.monotonic() < deadline:
                finished = sum(client.count(q, s) for q in QUEUES for s in ("succeeded", "failed"))
                progress.update(bar, completed=finished)
                if finished >= total:
                    break
                worked = 0
                for name in QUEUES:
                    try:
                        jobs = client.dequeue(name, 100)
                    except DequeueRateLimited:
                        continue
                    ok = [Ack(j.descriptor, claim=j.claim) for j in jobs
                          if run_job(j.body, j.attempts_allowed, j.attempts_remaining)]
                    failed = [Ack(j.descriptor, "demo failure", claim=j.claim) for j in jobs
                              if not run_job(j.body, j.attempts_allowed, j.attempts_remaining)]
                    client.ack(name, succeeded=ok, failed=failed)
                    worked += len(jobs)
                if time.monotonic() - last_monitor > 0.5:
                    stats = monitor.run_once()
                    monitor_totals["claims_repended"] += stats.claims_repended
                    monitor_totals["claims_failed"] += stats.claims_failed
                    last_monitor = time.monotonic()
                if not worked:
                    time.sleep(0.05)

        table = Table(title="jobs by state per queue")
        for column in ("queue", "pending", "pending (future)", "running", "succeeded", "failed"):
            table.add_column(column, justify="right" if column != "queue" else "left")
        for name in QUEUES:
            table.add_row(
                name,
                *(str(client.count(name, s)) for s in ("pending",)),
                str(client.count(name, "pending", future=True)),
                *(str(client.count(name, s)) for s in ("running", "succeeded", "failed")),
            )
        console.print(table)
        console.print(f"monitor: {monitor_totals['claims_repended']} timed-out claims re-pended, "
                      f"{monitor_totals['claims_failed']} failed")
        for shard, health in client.operators.shard_status().items():
            console.print(f"shard {shard}: {'healthy' if health.healthy else 'DOWN'}")
        finished = sum(client.count(q, s) for q in QUEUES for s in ("succeeded", "failed"))
        if finished < total:
            console.print(f"[red]only {finished} of {total} jobs finished before the timeout[/]")
            return 1
        console.print("[green]every job finished: SUCCEEDED, or FAILED after its retries[/]")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
