"""Fixtures of the worker tests: a setup's environment for worker
processes, an app in the test process, the job service, a monitor (claim
timeouts) and the results store (keys of this test only: test sessions
share Redis and never flush it).

``backend`` is a store setup of ``tests.support.stores.settings_for`` ("redis",
"mysql"), or one with "+thrift" ("redis+thrift"): then the workers and the
test's app reach the job service through a ``pinlater server`` process
over the same stores (``PINLATER_SERVERS``), as a remote deployment does,
while the test's own ``service`` still inspects the stores directly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from pinlater.operators import Monitor, MonitorStats
from pinlater.service import JobService
from tests.support.stores import settings_for
from tests.workers.celery_tasks import RESULTS_URL, RUN
from tests.workers.harness import Processes, make_test_app, processes, worker_env

THRIFT = "+thrift"


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "redis"))


@pytest.fixture
def stores(backend: str) -> str:
    """The setup of the shards and control store ("redis" for "redis+thrift")."""
    return backend.removesuffix(THRIFT)


# Store setups a test of this session has used: "redis" and "redis+thrift"
# share stores and the session's queue names.
_USED_STORES: set[str] = set()


@pytest.fixture
def env(
    servers: None, backend: str, stores: str, service: JobService, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    if stores in _USED_STORES:
        # An earlier test ran on these stores: its jobs are still in the
        # queues (a variant's counts must not see them). Queues come back
        # when this test's publishes and workers declare them.
        for queue in service.queue_names():
            if queue.endswith(f"_{RUN}"):
                service.delete_queue(queue, "secret")
    _USED_STORES.add(stores)
    # Results keys of this test, here and in its workers (which inherit it).
    monkeypatch.setenv("PINLATER_TEST_KEYS", uuid.uuid4().hex[:10])
    env = worker_env(stores, f"t{uuid.uuid4().hex[:8]}:")
    if backend.endswith(THRIFT):
        env["PINLATER_SERVERS"] = request.getfixturevalue("thrift_server")(stores)
    return env


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Celery]:
    app = make_test_app(env)
    yield app
    app.close()


@pytest.fixture
def service(stores: str) -> Iterator[JobService]:
    with JobService.from_settings(settings_for(stores), source="worker-tests") as client:
        yield client


class SessionMonitor(Monitor):
    """Tends this session's worker-test queues alone (they are declared as
    tests publish): the shards also hold every queue other tests of this
    process made, and a pass over all of them twice a second cost a busy
    core's worth of calls."""

    def run_once(self) -> MonitorStats:
        self.queues = sorted(q for q in self.operators.queue_config_texts() if q.endswith(f"_{RUN}"))
        return super().run_once()


@pytest.fixture
def monitor(service: JobService) -> Iterator[Monitor]:
    mon = SessionMonitor(service.operators, interval_s=0.5)
    mon.start_thread()
    yield mon
    mon.stop()


@pytest.fixture
def procs(env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    with processes(env, tmp_path) as p:
        yield p


@pytest.fixture
def results(env: dict[str, str]) -> Iterator[redis.Redis[bytes]]:
    client = redis.Redis.from_url(RESULTS_URL)
    yield client
    for name in client.scan_iter(match=f"{env['PINLATER_TEST_KEYS']}:*"):
        client.delete(name)
