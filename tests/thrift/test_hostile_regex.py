"""A hostile body regex through a real ``pinlater server`` process:
``(a+)+$`` over bodies of ``b"a" * 25 + b"!"`` took ~37 s under a
backtracking engine and stalled every other connection meanwhile. Here the
hostile calls must answer promptly and correctly while a normal client's
calls each complete within 1 s, on Redis and on MySQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from pinlater import CONTINUATION_END, Job
from pinlater.errors import PinLaterError
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, mysql_url, redis_url
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.server_process import ServerProcess, server_env
from tests.thrift.conftest import make_service

HOSTILE = "(a+)+$"
HOSTILE_BODY = b"a" * 25 + b"!"  # ~4.6 s each under Python's re
RUN_S = 4.0  # how long the two clients run side by side
NORMAL_MAX_S = 1.0  # the bound on every normal call
HOSTILE_MAX_S = 1.0  # a hostile call must answer promptly too
MAX_CALLS = 2000  # loops are bounded in count as well as in time


def backend_env(backend: str) -> dict[str, str]:
    if backend == "redis":
        return {
            "PINLATER_SHARDS": f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}",
            "PINLATER_CONTROL_URL": redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        }
    return {
        "PINLATER_SHARDS": f"d1={mysql_url(MYSQL_DATABASES['d1'])}",
        "PINLATER_CONTROL_URL": mysql_url(MYSQL_DATABASES["ctl"]),
    }


@pytest.fixture(params=["redis", "mysql"])
def server_port(request: pytest.FixtureRequest, servers: None) -> Iterator[int]:
    """A ``pinlater server`` subprocess over the backend; killed afterwards
    (under a backtracking engine it would still be inside the regex)."""
    proc = ServerProcess("--no-monitor", env=server_env(**backend_env(str(request.param))))
    try:
        yield proc.port
    finally:
        proc.kill()


@dataclass
class Calls:
    """What one client's loop saw: each call's name, latency and outcome."""

    latencies: list[tuple[str, float]] = field(default_factory=list)
    errors: list[tuple[str, float, str]] = field(default_factory=list)
    wrong: list[tuple[str, object]] = field(default_factory=list)

    def timed(self, name: str, call: Callable[[], object], check: Callable[[object], bool]) -> None:
        started = time.monotonic()
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 -- a timeout is the symptom under test: record it
            self.errors.append((name, time.monotonic() - started, repr(exc)))
            return
        self.latencies.append((name, time.monotonic() - started))
        if not check(result):
            self.wrong.append((name, result))

    def slowest(self) -> float:
        return max([s for _, s in self.latencies] + [s for _, s, _ in self.errors], default=0.0)


def run_until(deadline: float, step: Callable[[int], None]) -> None:
    for i in range(MAX_CALLS):
        if time.monotonic() >= deadline:
            return
        step(i)


def test_hostile_regex_answers_promptly_and_blocks_no_other_client(server_port: int, queue_name: str) -> None:
    address = [f"127.0.0.1:{server_port}"]
    # No retries and a timeout a little above the bound: a stalled call fails
    # fast instead of hiding behind the client's retry loop.
    setup = ThriftClient(address, source="regex-setup", timeout_s=30, retries=0)
    hostile = ThriftClient(address, source="regex-hostile", timeout_s=5, retries=0)
    normal = ThriftClient(address, source="regex-normal", timeout_s=5, retries=0)
    try:
        setup.create_queue(queue_name)
        setup.enqueue(queue_name, [Job(HOSTILE_BODY) for _ in range(8)])
        assert setup.count(queue_name, "pending") == 8

        hostile_calls, normal_calls = Calls(), Calls()
        deadline = time.monotonic() + RUN_S

        def hostile_step(i: int) -> None:
            if i % 2 == 0:
                hostile_calls.timed("count", lambda: hostile.count(queue_name, "pending", body_regex=HOSTILE),
                                    lambda n: n == 0)
            else:
                hostile_calls.timed(
                    "scan", lambda: hostile.scan(queue_name, "pending", body_regex=HOSTILE, limit=100),
                    lambda page: not page.jobs and page.continuation == CONTINUATION_END,  # type: ignore[attr-defined]
                )

        def normal_step(i: int) -> None:
            normal_calls.timed("getQueueNames", normal.queue_names, lambda names: queue_name in names)  # type: ignore[operator]
            normal_calls.timed("enqueue", lambda: normal.enqueue(queue_name, [Job(f"normal-{i}".encode())]),
                               lambda ds: len(ds) == 1)  # type: ignore[arg-type]
            normal_calls.timed("count", lambda: normal.count(queue_name, "pending"), lambda n: n >= 9)  # type: ignore[operator]
            time.sleep(0.02)

        attacker = threading.Thread(target=run_until, args=(deadline, hostile_step), daemon=True)
        attacker.start()
        time.sleep(0.1)  # the hostile calls are under way before the normal client starts
        run_until(deadline, normal_step)
        attacker.join(timeout=RUN_S + 15)
        assert not attacker.is_alive(), "the hostile client's loop did not finish"

        print(f"hostile: {len(hostile_calls.latencies)} calls, slowest {hostile_calls.slowest():.3f} s; "
              f"normal: {len(normal_calls.latencies)} calls, slowest {normal_calls.slowest():.3f} s")
        assert not hostile_calls.errors, hostile_calls.errors[:3]
        assert not hostile_calls.wrong, hostile_calls.wrong[:3]
        assert len(hostile_calls.latencies) >= 4, "the hostile client barely ran"
        assert hostile_calls.slowest() < HOSTILE_MAX_S
        assert not normal_calls.errors, normal_calls.errors[:3]
        assert not normal_calls.wrong, normal_calls.wrong[:3]
        assert len(normal_calls.latencies) >= 30, "the normal client barely ran"
        assert normal_calls.slowest() < NORMAL_MAX_S
        # The hostile pattern still means what it says: it matches bodies it should.
        setup.enqueue(queue_name, [Job(b"aaaa")])
        assert setup.count(queue_name, "pending", body_regex=HOSTILE) == 1
    finally:
        for c in (setup, hostile, normal):
            c.close()


@pytest.fixture
def small_budget_service(backend: str) -> Iterator[JobService]:
    service = make_service(backend, regex_max_bodies=3)
    yield service
    service.close()


def test_regex_errors_reach_thrift_clients_whole(
    small_budget_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    server = start_server(small_budget_service)
    client = ThriftClient([f"127.0.0.1:{server.port}"], source="regex-errors", timeout_s=10, retries=0)
    try:
        client.create_queue(queue_name)
        client.enqueue(queue_name, [Job(b"z-%d" % i) for i in range(4)])
        with pytest.raises(PinLaterError, match=r"\(RE2 syntax\): invalid perl operator: \(\?="):
            client.count(queue_name, "pending", body_regex="(?=z)z")
        with pytest.raises(PinLaterError, match=r"examined 3 bodies.*PINLATER_REGEX_MAX_BODIES.*give a priority"):
            client.count(queue_name, "pending", body_regex="^z-")
        with pytest.raises(PinLaterError, match=r"delete .*nothing was deleted"):
            client.delete_jobs(queue_name, "pending", body_regex="^z-[9]")
        page = client.scan(queue_name, "pending", body_regex="^z-", limit=10)
        assert len(page.jobs) == 3 and page.continuation != CONTINUATION_END
        assert len(client.scan(queue_name, "pending", body_regex="^z-", continuation=page.continuation).jobs) == 1
        assert client.count(queue_name, "pending") == 4
    finally:
        client.close()
