"""What the Thrift server decides by who calls (``pinlater.caller``): a
worker's "create" of a queue only declares one that exists, so it never
brings back a queue an admin has just deleted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pinlater import Job
from pinlater.errors import PasswordInvalid, QueueNotFound
from pinlater.service import JobService
from pinlater.thrift.security import Security
from pinlater.thrift.server import ThriftServer
from pinlater.thrift_client import ThriftClient
from tests.support.tls import Certs, make_certs
from tests.thrift.conftest import make_service

SECRET = "secret"  # the admin secret of tests.support.stores' settings


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("callers"))


@pytest.fixture
def clients(certs: Certs) -> Iterator[Callable[[ThriftServer, str], ThriftClient]]:
    made: list[ThriftClient] = []

    def make(server: ThriftServer, identity: str) -> ThriftClient:
        client = ThriftClient([f"127.0.0.1:{server.port}"], source=f"{identity}-test", timeout_s=10,
                              tls=certs.client(identity), retries=0)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.mark.parametrize("backend", ["redis", "mysql"])
def test_a_workers_create_never_brings_back_a_queue_an_admin_deleted(
    servers: Any, backend: str, certs: Certs, start_server: Callable[..., ThriftServer],
    clients: Callable[[ThriftServer, str], ThriftClient], queue_name: str,
) -> None:
    # The server trusts its cached configs for a minute, so it still holds
    # the queue when another process deletes it.
    service = make_service(backend, config_ttl_s=60.0)
    operator = JobService(service.core.sibling(), source="operator")
    try:
        server = start_server(service, security=Security(certs.server(), certs.roles))
        worker, admin = clients(server, "tls-worker"), clients(server, "tls-admin")
        admin.create_queue(queue_name, priorities=2)
        assert worker.create_queue(queue_name).priorities == 2  # declares it
        worker.enqueue(queue_name, [Job(b"work")])  # the server caches its config

        operator.delete_queue(queue_name, SECRET)
        for declare in (lambda: worker.create_queue(queue_name), lambda: worker.create_queue(queue_name, priorities=2)):
            with pytest.raises(PasswordInvalid, match="only the admin role creates queues") as refused:
                declare()
            assert "\n" not in refused.value.message
        assert queue_name not in operator.queue_names()
        with pytest.raises(QueueNotFound):
            operator.queue_config(queue_name, fresh=True)

        # An admin creates it again; then a worker's declaration works.
        admin.create_queue(queue_name)
        assert worker.create_queue(queue_name).priorities == 3
    finally:
        operator.close()
        service.close()
