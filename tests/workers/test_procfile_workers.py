# mypy: disable-error-code="no-untyped-call"
# (Celery's remote control is untyped.)
"""The Procfile's two workers as its runner starts them (shell lines, the
installed apps' tasks): ``worker`` consumes every task queue but the
backfill's, ``backfill`` that queue alone at a lower CPU priority, so a
backfill's pages neither run at the real-time tasks' priority nor wait
behind them. A ``-X`` naming no queue ends a worker with one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

from pinlater.kit import apps
from tests.servers import REPO
from tests.support.waits import wait_until
from tests.workers.harness import Processes, children, procfile_line

pytestmark = pytest.mark.slow

BACKFILL_QUEUE = "backfill"


def niceness(pid: int) -> int:
    # Field 19 of /proc/PID/stat, counted after the command name's closing parenthesis.
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def celery_processes(pid: int) -> list[int]:
    """The processes below ``pid`` (the runner's shell) that run Celery."""
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children(parent)]
        found += frontier
    return [p for p in found if b"celery" in Path(f"/proc/{p}/cmdline").read_bytes()]


def active_queues(app: Celery, node: str, name: str, procs: Processes) -> set[str]:
    host = f"{node}@{socket.gethostname()}"
    queues = wait_until(lambda: (app.control.inspect(timeout=0.5, destination=[host]).active_queues() or {})
                        .get(host), 60, what=lambda: procs.log(name)[-2000:])
    return {q["name"] for q in queues}


def test_the_backfill_runs_in_a_worker_of_its_own_at_a_lower_priority(
    app: Celery, env: dict[str, str], procs: Processes
) -> None:
    apps_env = {k: v for k, v in env.items() if k != "PINLATER_CELERY_IMPORTS"}  # the installed apps' tasks
    # The venv's commands first, as the Procfile's runner has them (scripts/run).
    apps_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), apps_env.get("PATH", "")])
    for name in ("worker", "backfill"):
        procs.start_shell(name, procfile_line(name), apps_env, REPO)
    main = active_queues(app, "worker1", "worker", procs)
    backfill = active_queues(app, "backfill1", "backfill", procs)
    assert backfill == {BACKFILL_QUEUE}
    # Every other queue of the installed apps, the built-in tasks' and Celery's default one.
    app_queues = {queue for installed in apps.installed()[0] for queue in installed.queue_names}
    assert {"feed_fanout", "typeahead_update", BACKFILL_QUEUE} <= app_queues
    assert main == app_queues - {BACKFILL_QUEUE} | {"celery_noop", "celery"}

    def nice_of(name: str) -> set[int]:
        pids = celery_processes(procs.procs[name].pid)
        # The worker's own process and its pool's (-c 2).
        assert len(pids) >= 3, (name, pids)
        return {niceness(p) for p in pids}

    assert nice_of("worker") == {0}
    assert nice_of("backfill") == {10}


def test_an_exclusion_naming_no_queue_is_refused_in_one_line(env: dict[str, str]) -> None:
    apps_env = {k: v for k, v in env.items() if k != "PINLATER_CELERY_IMPORTS"}
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-n", "typo@%h",
                           "-X", "bakfill", "--without-gossip", "--without-mingle"],
                          env=apps_env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("error: -X bakfill: no such queue (known: backfill, "), \
        done.stderr[-2000:]
