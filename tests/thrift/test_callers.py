"""What the Thrift server decides by who calls (``pinlater.engine.caller``): wrong
admin secrets are throttled per client and per server process, and a
worker's "create" of a queue only declares one that exists, so it never
brings back a queue an admin has just deleted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pinlater import Job
from pinlater.engine import admin as queue_admin
from pinlater.errors import PasswordInvalid, QueueNotFound
from pinlater.service import JobService
from pinlater.settings import hash_secret
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.security import Security
from pinlater.thrift.server import ThriftServer
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


def test_wrong_admin_secrets_are_throttled_per_client_and_per_server(
    servers: Any, certs: Certs, start_server: Callable[..., ThriftServer],
    clients: Callable[[ThriftServer, str], ThriftClient], queue_name: str,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # Client certificates without a roles file: every certificate may call
    # deleteQueue, and each is a caller of its own.
    service = make_service("redis", admin_secret_max_failures=3, admin_secret_max_failures_all=5,
                           admin_secret_window_s=2.0)
    try:
        server = start_server(service, security=Security(certs.server()))
        guesser, other, admin = (clients(server, f"tls-{r}") for r in ("producer", "operator", "admin"))
        admin.create_queue(queue_name)
        hashed: list[str] = []

        def counted_hash(secret: str) -> str:
            hashed.append(secret)
            return hash_secret(secret)

        monkeypatch.setattr(queue_admin, "hash_secret", counted_hash)
        caplog.set_level(logging.INFO)

        for n in range(3):
            with pytest.raises(PasswordInvalid, match=r"^wrong admin secret$"):
                guesser.delete_queue(queue_name, f"guess-{n}")
        assert len(hashed) == 3
        # Refused without the secret being looked at, even the right one.
        with pytest.raises(PasswordInvalid) as refused:
            guesser.delete_queue(queue_name, SECRET)
        assert refused.value.message.startswith(
            "too many wrong admin secrets from 'tls-producer': refused without checking, for ")
        assert len(hashed) == 3 and "\n" not in refused.value.message
        assert queue_name in service.queue_names()

        # Another client is not held back by it, until the server has seen
        # too many wrong secrets from them all.
        for n in range(2):
            with pytest.raises(PasswordInvalid, match=r"^wrong admin secret$"):
                other.delete_queue(queue_name, f"other-{n}")
        with pytest.raises(PasswordInvalid, match=r"^too many wrong admin secrets on this server"):
            admin.delete_queue(queue_name, SECRET)
        assert len(hashed) == 5 and queue_name in service.queue_names()

        time.sleep(2.1)  # the window passes: the right secret works again
        admin.delete_queue(queue_name, SECRET)
        assert queue_name not in service.queue_names()

        logged = [r.getMessage() for r in caplog.records]
        assert not [line for line in logged if "guess-" in line or "other-" in line], logged
        throttle_lines = [r for r in caplog.records if r.name == "pinlater.kit.secret_throttle"]
        # At most one line a second over the ~2.3 s above.
        assert 1 <= len(throttle_lines) <= 3, [r.getMessage() for r in throttle_lines]
    finally:
        service.close()


def test_in_process_callers_are_throttled_too(queue_name: str) -> None:
    service = make_service("memory", admin_secret_max_failures=2, admin_secret_max_failures_all=5)
    try:
        service.create_queue(queue_name)
        for _ in range(2):
            with pytest.raises(PasswordInvalid, match=r"^wrong admin secret$"):
                service.delete_queue(queue_name, "guess")
        with pytest.raises(PasswordInvalid, match=r"^too many wrong admin secrets from 'in-process'"):
            service.delete_queue(queue_name, SECRET)
        assert queue_name in service.queue_names()
    finally:
        service.close()


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
        for priorities in (None, 2):  # createQueue, createQueueWithConfig
            with pytest.raises(PasswordInvalid, match="only the admin role creates queues") as refused:
                worker.create_queue(queue_name, priorities=priorities)
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
