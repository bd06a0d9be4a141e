"""`make run` as a newcomer meets it: every Procfile process comes up with
the venv's commands found and on the demo's settings (.var/demo.env), so the
dashboard shows the demo's shards and queues, and a store that holds nothing
yet (no app data made) reads as no runs, not as an error. It runs
``scripts/run`` (what `make run` runs once the venv and the servers are up)
for a bounded time, on the loopback only, and stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pinlater.demo import DEMO_SHARDS
from tests.dashboards.http import call
from tests.servers import REPO, ensure_services, free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo_settings")]

PROCESSES = ("server", "monitor", "dashboard", "worker", "backfill", "beat", "flower", "feeds_http",
             "typeahead_http", "contacts_thrift")
UP_FOR_S = 90.0


def procfile_names() -> list[str]:
    return [line.split(":", 1)[0] for line in (REPO / "Procfile").read_text().splitlines() if ":" in line]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc's parent links."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def eventually(check: Callable[[], Any], deadline: float, what: Callable[[], str]) -> Any:
    while True:
        with contextlib.suppress(OSError):
            if value := check():
                return value
        assert time.monotonic() < deadline, what()
        time.sleep(0.5)


def test_make_run_starts_every_procfile_process_on_the_demos_settings(tmp_path: Path) -> None:
    assert sorted(procfile_names()) == sorted(PROCESSES)
    ensure_services()
    ports = {name: free_port() for name in ("server", "metrics", "dashboard", "feeds", "typeahead", "contacts",
                                            "contacts_metrics")}
    # A newcomer's environment: none of the project's settings, the venv not activated.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PINLATER_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p)
    if "PINLATER_VAR" in os.environ:  # where the shared test servers keep their certificates
        env["PINLATER_VAR"] = os.environ["PINLATER_VAR"]
    env.update(PINLATER_SERVER_PORT=str(ports["server"]), PINLATER_METRICS_PORT=str(ports["metrics"]),
               PINLATER_DASHBOARD_PORT=str(ports["dashboard"]), PINLATER_FEED_HTTP=f"127.0.0.1:{ports['feeds']}",
               PINLATER_TYPEAHEAD_HTTP=f"127.0.0.1:{ports['typeahead']}",
               PINLATER_TYPEAHEAD_THRIFT=f"127.0.0.1:{ports['contacts']}",
               PINLATER_TYPEAHEAD_THRIFT_METRICS_PORT=str(ports["contacts_metrics"]))
    log = tmp_path / "run.log"
    dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(REPO / "scripts" / "run")], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def shown() -> str:
        return log.read_text(errors="replace")[-4000:]

    try:
        deadline = time.monotonic() + UP_FOR_S
        overview = eventually(lambda: call(dashboard + "/api/overview")[1], deadline, shown)
        demo_shards = sorted(part.split("=", 1)[0] for part in DEMO_SHARDS.split(","))
        assert sorted(s["id"] for s in overview["shards"]) == demo_shards  # the demo's three, not a default one
        # The worker creates the queues of every installed app on the demo's shards.
        names = eventually(lambda: {q["name"] for q in call(dashboard + "/api/overview")[1]["queues"]}
                           >= {"feed_fanout", "typeahead_update", "backfill"}, deadline, shown)
        assert names
        backfills = eventually(lambda: (b := call(dashboard + "/api/backfills")[1])["checked_at_ms"] and b,
                               deadline, shown)
        assert backfills["error"] is None, backfills
        assert proc.poll() is None, shown()  # honcho stops every process when one ends
        started = {line.split("|", 1)[1].split()[0].split(".")[0]
                   for line in log.read_text(errors="replace").splitlines() if " started (pid=" in line}
        assert started >= set(PROCESSES), shown()
    finally:
        started_here = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # honcho starts each process in a session of its own: killed before
        # it has stopped them, it leaves them running on the demo's shards.
        for pid in started_here:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
