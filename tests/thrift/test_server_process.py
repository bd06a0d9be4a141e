"""``pinlater server`` as a process: flags and environment, the monitor
thread (or ``--no-monitor``), the metrics endpoint, ``pinlater
server-stats``, and a clean exit on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from pinlater import Job
from pinlater.thrift.client import ServerUnavailable, ThriftClient
from tests.support.server_process import ServerProcess, cli, server_env
from tests.support.waits import wait_for


@pytest.fixture
def proc(servers: None) -> Iterator[ServerProcess]:
    with ServerProcess("--monitor-interval", "0.3") as p:
        yield p


def test_server_process_serves_reports_and_stops_on_sigterm(proc: ServerProcess, queue_name: str) -> None:
    client = ThriftClient([f"127.0.0.1:{proc.port}"], source="proc-test")
    client.create_queue(queue_name)
    client.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    assert client.count(queue_name, "pending") == 2

    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert 'pinlater_server_requests_total{method="enqueueJobs"} 1' in metrics
    assert "pinlater_server_connections_open 1" in metrics
    # One process: its store calls too, from the job service's seam.
    store_lines = [line for line in metrics.splitlines() if line.startswith("pinlater_store_calls_total{")]
    assert any('op="enqueue"} 1' in line for line in store_lines), store_lines

    out = subprocess.run(cli("--json", "server-stats", "--url", f"http://127.0.0.1:{proc.metrics_port}"),
                         capture_output=True, text=True, timeout=30, env=server_env())
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert stats["methods"]["getJobCount"]["requests"] == 1
    # ThriftClient.create_queue calls the createQueueWithConfig extension.
    assert {"p50_ms", "p99_ms", "errors"} <= set(stats["methods"]["createQueueWithConfig"])
    table = subprocess.run(cli("server-stats", "--url", f"http://127.0.0.1:{proc.metrics_port}"),
                           capture_output=True, text=True, timeout=30, env=server_env())
    assert "enqueueJobs" in table.stdout and "p99_ms" in table.stdout

    # A pass tends every queue of the shared test stores: seconds on a busy machine.
    wait_for(lambda: "monitor pass" in proc.log(), "a monitor pass", 60, 0.1)
    code, err = proc.terminate()
    assert code == 0, err
    assert "monitor running every" in err and "monitor pass" in err
    assert "pinlater thrift server stopped" in err
    with pytest.raises(ServerUnavailable):
        client.queue_names()  # its pooled connection was closed, and nobody listens
    client.close()


def test_no_monitor_flag(servers: None) -> None:
    with ServerProcess("--no-monitor") as p, p.client("proc-test") as c:
        assert isinstance(c.queue_names(), set)
        time.sleep(0.5)
        code, err = p.terminate()
    assert code == 0
    assert "monitor running" not in err


def test_server_stats_without_a_server_fails_cleanly() -> None:
    out = subprocess.run(cli("server-stats", "--url", "http://127.0.0.1:1"), capture_output=True, text=True,
                         timeout=30, env=server_env())
    assert out.returncode == 2 and "cannot read server stats" in out.stderr
