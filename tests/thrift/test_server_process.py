"""``pinlater server`` as a process: flags and environment, the monitor
thread (or ``--no-monitor``), the metrics endpoint, ``pinlater
server-stats``, and a clean exit on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from pinlater import Job
from pinlater.thrift_client import ServerUnavailable, ThriftClient
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, redis_url

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+), metrics on http://127\.0\.0\.1:(\d+)/metrics")


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PINLATER_SHARDS": f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}",
        "PINLATER_CONTROL_URL": redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        "PINLATER_ADMIN_SECRET": "secret",
        "PINLATER_SERVER_HOST": "127.0.0.1",
        "PINLATER_SERVER_PORT": "0",
    })
    env.pop("PINLATER_SERVERS", None)
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pinlater.cli", *args]


class Proc:
    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen(
            cli("server", "--metrics-port", "0", "--monitor-interval", "0.3", *args),
            env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.p.stdout is not None
        line = self.p.stdout.readline()  # the server prints it once listening
        match = LISTENING.search(line)
        assert match, f"unexpected first line {line!r}; stderr: {self.stderr_now()}"
        self.port, self.metrics_port = int(match.group(1)), int(match.group(2))

    def stderr_now(self) -> str:
        if self.p.poll() is None:
            self.p.kill()
        return self.p.communicate(timeout=10)[1]

    def terminate(self) -> tuple[int, str]:
        self.p.send_signal(signal.SIGTERM)
        _, err = self.p.communicate(timeout=20)
        return self.p.returncode, err


@pytest.fixture
def proc(servers: None) -> Iterator[Proc]:
    p = Proc()
    yield p
    if p.p.poll() is None:
        p.p.kill()
        p.p.communicate(timeout=10)


def test_server_process_serves_reports_and_stops_on_sigterm(proc: Proc, queue_name: str) -> None:
    client = ThriftClient([f"127.0.0.1:{proc.port}"], source="proc-test")
    client.create_queue(queue_name)
    client.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    assert client.count(queue_name, "pending") == 2

    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert 'pinlater_server_requests_total{method="enqueueJobs"} 1' in metrics
    assert "pinlater_server_connections_open 1" in metrics

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

    time.sleep(0.5)  # a monitor pass or two
    code, err = proc.terminate()
    assert code == 0, err
    assert "monitor running every" in err and "monitor pass" in err
    assert "pinlater thrift server stopped" in err
    with pytest.raises(ServerUnavailable):
        client.queue_names()  # its pooled connection was closed, and nobody listens
    client.close()


def test_no_monitor_flag(servers: None) -> None:
    p = Proc("--no-monitor")
    with ThriftClient([f"127.0.0.1:{p.port}"], source="proc-test") as c:
        assert isinstance(c.queue_names(), set)
    time.sleep(0.5)
    code, err = p.terminate()
    assert code == 0
    assert "monitor running" not in err


def test_server_stats_without_a_server_fails_cleanly() -> None:
    out = subprocess.run(cli("server-stats", "--url", "http://127.0.0.1:1"), capture_output=True, text=True,
                         timeout=30, env=server_env())
    assert out.returncode == 2 and "cannot read server stats" in out.stderr
