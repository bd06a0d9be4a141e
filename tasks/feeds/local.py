"""Running the feed workers on this machine, for the demo and the
benchmark: Celery worker processes of ``tasks.feeds.tasks`` in their own
process groups (stopped with SIGTERM, killed if they linger), and the job
counts of the feed queues."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from pinlater.client_api import PinLaterClient
from tasks.feeds import queues

REPO = Path(__file__).resolve().parents[2]
STATES = ("pending", "running", "succeeded", "failed")


@contextmanager
def worker_processes(
    env: dict[str, str], count: int, logdir: Path, *, concurrency: int = 2, name: str = "feeds",
    queue_names: Sequence[str] = queues.ALL,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = []
    try:
        for i in range(count):
            log = open(logdir / f"{name}{i + 1}.log", "wb")  # noqa: SIM115 (the child keeps it)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-n", f"{name}{i + 1}@%h",
                 "-c", str(concurrency), "-Q", ",".join(queue_names), "--without-gossip", "--without-mingle",
                 "-l", "warning"],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))
            log.close()
        yield procs
    finally:
        for proc in procs:
            with suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def feed_counts(client: PinLaterClient, queue_names: Sequence[str] = queues.ALL) -> dict[str, dict[str, int]]:
    """Jobs by state per queue (the feed queues by default); pending
    includes those scheduled later (retries waiting out their delay)."""
    out = {}
    for queue in queue_names:
        by_state = {state: client.count(queue, state) for state in STATES}
        by_state["pending"] += client.count(queue, "pending", future=True)
        out[queue] = by_state
    return out


def jobs_left(client: PinLaterClient, queue_names: Sequence[str] = queues.ALL) -> int:
    return sum(c["pending"] + c["running"] for c in feed_counts(client, queue_names).values())
