"""``pinlater server --processes N``: several processes on one port, each
with its own connections to the stores, connections spread over them,
metrics summed over them, children replaced when they die, and nothing
left running after SIGTERM (or after the parent is killed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pinlater import Ack, Job, JobService
from pinlater.models import DequeuedJob
from pinlater.settings import Settings
from tests.servers import mysql_url
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.server_process import ServerProcess, cli, server_env

# Server processes started and stopped, ten seconds a test: started early, so
# no process is left with them at the end.
pytestmark = pytest.mark.slow

CLIENTS = 6


def server_process(log_dir: Path, *args: str, **env: str) -> ServerProcess:
    """``pinlater server --processes N`` with its log in ``log_dir``."""
    log = log_dir / f"server-{len(list(log_dir.glob('server-*.log')))}.log"
    return ServerProcess("--no-monitor", "--grace", "5", *args, env=server_env(**env), log_path=log)


@pytest.fixture
def start(servers: None, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def run(*args: str, **env: str) -> ServerProcess:
        server = server_process(tmp_path, *args, **env)
        started.append(server)
        return server

    yield run
    for server in started:
        server.kill()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["redis", "mysql"])
def test_concurrent_clients_each_job_processed_once(
    start: Callable[..., ServerProcess], queue_name: str, backend: str
) -> None:
    env = {}
    if backend == "mysql":
        env = {"PINLATER_SHARDS": f"d1={mysql_url(MYSQL_DATABASES['d1'])}",
               "PINLATER_CONTROL_URL": mysql_url(MYSQL_DATABASES["ctl"])}
    server = start("--processes", "3", **env)
    clients = [server.client(f"w{i}") for i in range(CLIENTS)]
    clients[0].create_queue(queue_name)
    per_client = 40
    errors: list[BaseException] = []
    got: list[bytes] = []
    lock = threading.Lock()

    def produce(i: int) -> None:
        for n in range(per_client):
            clients[i].enqueue(queue_name, [Job(f"{i}-{n}".encode())])

    def consume(i: int) -> None:
        acks: list[Ack] = []
        empty = 0
        while empty < 3:
            jobs = clients[i].dequeue(queue_name, 1, succeeded=acks)
            acks = [Ack(j.descriptor) for j in jobs]
            with lock:
                got.extend(j.body for j in jobs)
            empty = 0 if jobs else empty + 1
        if acks:
            clients[i].ack(queue_name, succeeded=acks)

    def run_all(fn: Callable[[int], None]) -> None:
        def guarded(i: int) -> None:
            try:
                fn(i)
            except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors

    run_all(produce)
    run_all(consume)
    expected = sorted(f"{i}-{n}".encode() for i in range(CLIENTS) for n in range(per_client))
    assert sorted(got) == expected  # each once: none lost, none twice
    assert clients[0].count(queue_name, "succeeded") == len(expected)
    assert clients[0].count(queue_name, "pending") + clients[0].count(queue_name, "running") == 0
    for c in clients:
        c.close()


def test_connections_spread_and_metrics_are_summed(start: Callable[..., ServerProcess], queue_name: str) -> None:
    server = start("--processes", "3")
    clients = [server.client(f"c{i}") for i in range(CLIENTS)]
    clients[0].create_queue(queue_name)
    for c in clients:  # one after another: each new connection goes to the least loaded process
        c.count(queue_name, "pending")
    stats = server.stats()
    processes = stats["processes"]
    assert len({p["pid"] for p in processes}) == 3 and all(p["pid"] for p in processes)
    assert [p["connections_open"] for p in processes] == [2, 2, 2]
    assert stats["connections_open"] == CLIENTS

    # Clients leave until one process holds none: new connections go there
    # first (the least loaded process), not round robin.
    def open_by_process() -> list[int]:
        return [p["connections_open"] for p in server.stats()["processes"]]

    left = 0
    while min(open_by_process()) > 0:
        clients[left].close()
        left += 1
        still_open = CLIENTS - left
        wait_for(lambda: sum(open_by_process()) == still_open)  # noqa: B023 -- called at once
    for i in range(left):
        clients[i] = server.client(f"again{i}")
        clients[i].count(queue_name, "pending")
    assert open_by_process() == [2, 2, 2]

    calls = 5
    for c in clients:
        for _ in range(calls):
            c.count(queue_name, "pending")
        c.enqueue(queue_name, [Job(b"x")])
    stats = server.stats()
    counts = CLIENTS * (calls + 1) + left
    assert stats["methods"]["getJobCount"]["requests"] == counts
    assert stats["methods"]["enqueueJobs"]["requests"] == CLIENTS
    assert stats["methods"]["createQueueWithConfig"]["requests"] == 1
    total = sum(m["requests"] for m in stats["methods"].values())
    assert total == counts + CLIENTS + 1
    assert sum(p["requests"] for p in stats["processes"]) == total
    assert all(p["requests"] >= 2 * (calls + 2) for p in stats["processes"])  # every process served its two
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert f'pinlater_server_requests_total{{method="getJobCount"}} {counts}' in metrics
    assert "pinlater_server_processes 3" in metrics
    assert f"pinlater_server_connections_open {CLIENTS}" in metrics

    # Each child's store calls too, summed (each writes its counts about
    # once a second): one enqueue per client, spread over the processes.
    def store(metric: str, op: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as response:
            lines = response.read().decode().splitlines()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines
                   if line.startswith(f"{metric}{{") and f'op="{op}"' in line)

    wait_for(lambda: store("pinlater_store_calls_total", "enqueue") == CLIENTS)
    assert store("pinlater_store_call_seconds_count", "enqueue") == CLIENTS
    for c in clients:
        c.close()


def test_a_killed_child_is_replaced_and_the_server_keeps_answering(
    start: Callable[..., ServerProcess], queue_name: str
) -> None:
    server = start("--processes", "3")
    clients = [server.client(f"k{i}") for i in range(CLIENTS)]
    clients[0].create_queue(queue_name)
    for c in clients:
        c.enqueue(queue_name, [Job(b"before")])
    before = server.child_pids()
    os.kill(before[1], signal.SIGKILL)
    wait_for(lambda: server.child_pids()[1] not in (0, before[1]))
    after = server.child_pids()
    assert after[0] == before[0] and after[2] == before[2]
    stats = server.stats()
    assert stats["process_restarts"] == 1 and stats["processes"][1]["restarts"] == 1
    # The two clients whose connection went with the child reconnect, to a live process.
    for c in clients:
        c.enqueue(queue_name, [Job(b"after")])
    assert clients[0].count(queue_name, "pending") == 2 * CLIENTS
    stats = server.stats()
    assert stats["methods"]["enqueueJobs"]["requests"] == 2 * CLIENTS  # the dead child's calls still count
    assert f"server process 1 (pid {before[1]}) exited with signal SIGKILL" in server.log()
    for c in clients:
        c.close()


def test_sigterm_stops_every_child_after_calls_in_flight(start: Callable[..., ServerProcess], queue_name: str) -> None:
    server = start("--processes", "3")
    clients = [server.client(f"t{i}") for i in range(CLIENTS)]
    clients[0].create_queue(queue_name)
    pids = server.child_pids()
    acknowledged = [0] * CLIENTS
    stop = threading.Event()

    def load(i: int) -> None:
        with contextlib.suppress(Exception):  # the server going away ends the load
            while not stop.is_set():
                clients[i].enqueue(queue_name, [Job(b"j")])
                acknowledged[i] += 1

    threads = [threading.Thread(target=load, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    wait_for(lambda: sum(acknowledged) >= 50)
    server.p.send_signal(signal.SIGTERM)
    assert server.p.wait(30) == 0
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(alive(pid) for pid in pids)
    log = server.log()
    assert log.count("pinlater thrift server stopped") == 3
    assert "pinlater server stopped (3 processes)" in log
    # Every enqueue that was answered is stored (a call cut off unanswered may be too).
    with JobService.from_settings(Settings.from_env(server_env()), source="check") as check:
        stored = check.count(queue_name, "pending")
    assert sum(acknowledged) <= stored <= sum(acknowledged) + CLIENTS
    for c in clients:
        c.close()


def test_children_stop_when_the_parent_is_killed(start: Callable[..., ServerProcess]) -> None:
    server = start("--processes", "2")
    pids = server.child_pids()
    server.p.kill()
    server.p.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout_s=10)


def test_a_crash_loop_stops_the_server(start: Callable[..., ServerProcess]) -> None:
    server = start("--processes", "3")
    first = server.child_pids()
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all(pid not in (0, *first) for pid in server.child_pids()))
    second = server.child_pids()
    for pid in second:  # six unexpected exits within a minute: over the limit of five
        os.kill(pid, signal.SIGKILL)
    assert server.p.wait(30) == 1
    assert "giving up" in server.log()


def test_processes_from_the_environment(start: Callable[..., ServerProcess]) -> None:
    server = start(PINLATER_SERVER_PROCESSES="2")
    assert len(server.child_pids()) == 2
    single = start()  # default: one process, as before
    assert len(single.child_pids()) == 1 and single.child_pids()[0] == single.p.pid


@pytest.mark.parametrize("value", ["0", "-1", "1000000", "two", "2.5", ""])
def test_bad_process_counts_are_one_line_errors(value: str) -> None:
    out = subprocess.run(cli("server", f"--processes={value}"), capture_output=True, text=True, timeout=60,
                         env=server_env())
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: --processes: "), out.stderr
    if not value:
        return  # the variable set to nothing is unset, as every setting is: the default applies
    env = dict(server_env(), PINLATER_SERVER_PROCESSES=value)
    out = subprocess.run(cli("server"), capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "PINLATER_SERVER_PROCESSES" in out.stderr, out.stderr


def test_the_parents_monitor_re_pends_an_expired_claim(servers: None, tmp_path: Path, queue_name: str) -> None:
    """Without ``--no-monitor`` the server's monitor runs beside its
    children (in the parent): a job claimed through one process and never
    ACKed is pending again after its claim timeout, and another client's
    dequeue gets it."""
    log = tmp_path / "server-monitored.log"
    with ServerProcess("--grace", "5", "--processes", "2", "--monitor-interval", "0.2", env=server_env(),
                       log_path=log) as server:
        worker, other = server.client("lost-worker"), server.client("other-worker")
        worker.create_queue(queue_name, claim_timeout_ms=300)
        [descriptor] = worker.enqueue(queue_name, [Job(b"claimed, never acked")])
        [claimed] = worker.dequeue(queue_name, 1)
        assert claimed.descriptor == descriptor
        deadline = time.monotonic() + 15
        again: list[DequeuedJob] = []
        while not again:
            running = worker.count(queue_name, "running")
            assert time.monotonic() < deadline, f"the claim never expired: {running} running"
            time.sleep(0.1)
            again = other.dequeue(queue_name, 1)
        assert [j.descriptor for j in again] == [descriptor]
        other.ack(queue_name, succeeded=[Ack(descriptor)])
        assert worker.count(queue_name, "succeeded") == 1
        for c in (worker, other):
            c.close()
