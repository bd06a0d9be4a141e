"""``pinlater-typeahead serve-thrift --processes N`` on real MariaDB and
HBase: the children share one port and spread the connections, each
rebuilds and looks up on stores of its own, the parent's ``/stats.json``
and ``/metrics`` sum them (the HBase and MySQL calls too), and SIGTERM
leaves nothing running. The supervisor itself (restarts, crash loops, an
orphaned child) is the job server's, tested there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.appdata import graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPair
from tasks.typeahead.wire import connect, idl
from tests.servers import HBASE_PRIMARY, HBASE_PRIMARY_THRIFT2, HBASE_STANDBY, HBASE_STANDBY_THRIFT2
from tests.support.appdata import ENV as APPDATA_ENV
from tests.support.gc_probe import probed, reports
from tests.support.hbase import PREFIX
from tests.typeahead.helpers import users

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 2
CLIENTS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return str(response.read().decode())


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@contextlib.contextmanager
def _serving(tmp_path: Path, processes: int, extra_env: dict[str, str] | None = None
             ) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """The service of ``processes`` processes on this session's app data and
    tables: (the process, its port, its metrics port)."""
    metrics_port = _free_port()
    # The tests rebuild the primary only: a lookup that a busy machine slows
    # past the standby cut-off would read the standby's empty index (the
    # ``index`` fixture asks the standby only once the primary failed too).
    env = {**os.environ, **APPDATA_ENV, "PINLATER_TYPEAHEAD_STANDBY_AFTER_MS": "0",
           "PINLATER_HBASE_TABLE_PREFIX": PREFIX,
           "PINLATER_HBASE_PRIMARY": HBASE_PRIMARY, "PINLATER_HBASE_STANDBY": HBASE_STANDBY,
           "PINLATER_HBASE_PRIMARY_THRIFT2": HBASE_PRIMARY_THRIFT2,
           "PINLATER_HBASE_STANDBY_THRIFT2": HBASE_STANDBY_THRIFT2, **(extra_env or {})}
    log = (tmp_path / "contacts.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tasks.typeahead.cli", "serve-thrift", "--port", "0", "--processes", str(processes),
         "--metrics-port", str(metrics_port), "--grace", "5"],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO, env=env, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("pinlater-typeahead thrift listening on 127.0.0.1:"), (line, _log(tmp_path))
        shown = f" ({processes} processes)" if processes > 1 else ""
        assert line.endswith(f"metrics on http://127.0.0.1:{metrics_port}/metrics{shown}"), line
        port = int(line.split("listening on 127.0.0.1:", 1)[1].split(",", 1)[0])
        yield proc, port, metrics_port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


@pytest.fixture
def served(appdata: AppData, pair: ClusterPair, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    with _serving(tmp_path, PROCESSES) as running:
        yield running


def _log(tmp_path: Path) -> str:
    return (tmp_path / "contacts.log").read_text()[-2000:]


def test_children_share_the_port_and_the_parent_sums_them(
    served: tuple[subprocess.Popen[str], int, int], appdata: AppData
) -> None:
    proc, port, metrics_port = served
    ann, bob, cat = users(appdata, "Ann Procs", "Bob Procs", "Cat Procs")
    at = now_ms() - 10_000
    graph.follow_user(appdata, ann, bob, at_ms=at)
    graph.follow_user(appdata, bob, cat, at_ms=at + 1)
    clients = [connect("127.0.0.1", port, timeout_ms=30_000) for _ in range(CLIENTS)]
    try:
        for c in clients:  # one after another: each goes to the process holding the fewest
            c.rebuild("primary", [ann, bob, cat])
        stats = json.loads(_get(metrics_port, "/stats.json"))
        processes = stats["processes"]
        assert len({p["pid"] for p in processes}) == PROCESSES and all(p["pid"] for p in processes)
        assert [p["connections_open"] for p in processes] == [CLIENTS // PROCESSES] * PROCESSES
        assert all(p["requests"] == CLIENTS // PROCESSES for p in processes)
        clients[-1].rebuildSecond("primary", [ann, bob, cat])

        # Every child answers from the same index: Ann finds Bob (she follows
        # him) and Cat (whom Bob follows) whichever process serves her.
        for c in clients:
            got: Any = c.lookup(idl.LookupRequest(owner=ann, query="procs", limit=10))
            assert [(m.contact.userId, m.source) for m in got.matches] == [(bob, "following"), (cat, "second_degree")]
        assert json.loads(_get(metrics_port, "/stats.json"))["methods"]["lookup"]["requests"] == CLIENTS

        # The children's HBase calls, summed on the parent's /metrics (each
        # writes its counts about once a second).
        def hbase_calls() -> int:
            return sum(int(float(line.rsplit(" ", 1)[1])) for line in _get(metrics_port, "/metrics").splitlines()
                       if line.startswith('pinlater_app_store_calls_total{store="hbase"'))

        pids = {p["pid"] for p in processes}
        _wait_for(lambda: hbase_calls() >= CLIENTS * 2)
        rebuilds = f'pinlater_contacts_server_requests_total{{method="rebuild"}} {CLIENTS}'
        assert rebuilds in _get(metrics_port, "/metrics")
    finally:
        for c in clients:
            c.close()

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("processes", [1, PROCESSES])
def test_the_service_collects_as_a_worker_does(processes: int, appdata: AppData, pair: ClusterPair,
                                                tmp_path: Path) -> None:
    """A service process runs the workers' page functions (a rebuild is a
    backfill page), so it runs the collector as a worker process does
    (workers.gc_policy): on a full index that policy took a page from
    1.2-1.4 to 0.8 ms of CPU a user."""
    probe = tmp_path / "probe"
    env = probed(probe, os.environ)
    with _serving(tmp_path, processes, {k: env[k] for k in ("PYTHONPATH", "GC_PROBE_DIR")}) as (proc, port, _):
        ann, bob = users(appdata, f"Ann Gc{processes}", f"Bob Gc{processes}")
        client = connect("127.0.0.1", port, timeout_ms=30_000)
        try:
            assert client.rebuild("primary", [ann, bob]) >= 0
        finally:
            client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, _log(tmp_path)
    seen = reports(probe)
    serving = [r for r in seen if (r["argv"][0].endswith("service_child.py") if processes > 1
                                   else "serve-thrift" in r["argv"])]
    assert len(serving) == processes, seen
    for r in serving:
        assert tuple(r["threshold"]) == (700, 10, 100), r
        assert r["frozen"] > 10_000, r  # what it started with, out of every collection
