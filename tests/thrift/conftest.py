"""Fixtures of the Thrift tests: a JobService over memory, Redis or MySQL,
a ThriftServer on an ephemeral 127.0.0.1 port in a thread, and a client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.support.stores import settings_for

BACKENDS = ["memory", "redis", "mysql"]


def make_service(setup: str, **overrides: object) -> JobService:
    return JobService.from_settings(settings_for(setup, **overrides), source="thrift-test-server")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param != "memory":
        request.getfixturevalue("servers")
    return str(request.param)


@pytest.fixture
def service(backend: str) -> Iterator[JobService]:
    svc = make_service(backend)
    yield svc
    svc.close()


@pytest.fixture
def memory_service() -> Iterator[JobService]:
    """A JobService over the memory store, whatever ``backend`` says."""
    svc = make_service("memory")
    yield svc
    svc.close()


@pytest.fixture
def start_server() -> Iterator[Callable[..., ThriftServer]]:
    """Starts servers (127.0.0.1, ephemeral ports); stops them afterwards."""
    started: list[ThriftServer] = []

    def start(service: JobService, **kwargs: Any) -> ThriftServer:
        kwargs.setdefault("metrics_port", 0)
        server = ThriftServer(service, "127.0.0.1", 0, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(grace_s=5)


@pytest.fixture
def server(service: JobService, start_server: Callable[..., ThriftServer]) -> ThriftServer:
    return start_server(service)


@pytest.fixture
def client(server: ThriftServer) -> Iterator[ThriftClient]:
    c = ThriftClient([f"127.0.0.1:{server.port}"], source="test-worker-a", timeout_s=10)
    yield c
    c.close()


@pytest.fixture
def other_client(server: ThriftServer) -> Iterator[ThriftClient]:
    c = ThriftClient([f"127.0.0.1:{server.port}"], source="test-worker-b", timeout_s=10)
    yield c
    c.close()
