"""Fixtures of the worker tests: a setup's environment for worker
processes, an app in the test process, the job service, a monitor (claim
timeouts) and the results store (keys of this test only: test sessions
share Redis and never flush it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from pinlater.monitor import Monitor
from pinlater.service import JobService
from tests.conftest import settings_for
from tests.workers.celery_tasks import RESULTS_URL
from tests.workers.harness import Processes, make_test_app, processes, worker_env


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "redis"))


@pytest.fixture
def env(servers: None, backend: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    # Results keys of this test, here and in its workers (which inherit it).
    monkeypatch.setenv("PINLATER_TEST_KEYS", uuid.uuid4().hex[:10])
    return worker_env(backend, f"t{uuid.uuid4().hex[:8]}:")


@pytest.fixture
def app(env: dict[str, str]) -> Iterator[Celery]:
    app = make_test_app(env)
    yield app
    app.close()


@pytest.fixture
def service(backend: str) -> Iterator[JobService]:
    with JobService.from_settings(settings_for(backend), source="worker-tests") as client:
        yield client


@pytest.fixture
def monitor(service: JobService) -> Iterator[Monitor]:
    mon = Monitor(service, interval_s=0.5)
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
