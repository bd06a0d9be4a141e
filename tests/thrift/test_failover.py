"""The client over several servers: failover when one stops, retries only
where repeating a call is harmless, and ``connect()`` choosing it by
configuration."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from pinlater import Ack, Job, JobState, connect
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.thrift.client import CallFailed, ServerUnavailable, ThriftClient
from pinlater.thrift.server import ThriftServer


def test_stopping_one_of_two_servers(
    service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    first, second = start_server(service), start_server(service)
    client = ThriftClient([f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"], source="failover-worker")
    client.create_queue(queue_name)
    for _ in range(4):  # round robin: both servers hold pooled connections now
        client.enqueue(queue_name, [Job(b"before")])
    assert first.stats.snapshot()["connections_open"] and second.stats.snapshot()["connections_open"]

    first.stop(grace_s=5)
    # Every kind of call goes on through the other, plain enqueues included:
    # a refused connection means the request was never sent.
    for i in range(6):
        [d] = client.enqueue(queue_name, [Job(f"after {i}".encode())])
        [job] = client.dequeue(queue_name, 1)
        client.ack(queue_name, succeeded=[Ack(job.descriptor)])
        assert client.lookup([d])
    assert client.count(queue_name, "pending") == 4
    assert client.count(queue_name, JobState.SUCCEEDED) == 6
    assert second.stats.snapshot()["methods"]["enqueueJobs"]["requests"] >= 6  # type: ignore[index]

    second.stop(grace_s=5)
    with pytest.raises(ServerUnavailable):
        client.queue_names()
    client.close()


class AcceptAndDrop:
    """A server that reads one request and closes without answering, as a
    server that crashes mid-call would: the request may have run."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            self.requests += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dropper() -> Iterator[AcceptAndDrop]:
    d = AcceptAndDrop()
    yield d
    d.close()


def test_only_safe_calls_are_retried_after_a_lost_reply(
    service: JobService, start_server: Callable[..., ThriftServer], dropper: AcceptAndDrop, queue_name: str
) -> None:
    good = start_server(service)
    service.create_queue(queue_name)
    servers = [f"127.0.0.1:{dropper.port}", f"127.0.0.1:{good.port}"]

    def fresh() -> ThriftClient:  # round robin starts at the dropping server
        return ThriftClient(servers, source="retry-worker", retries=2)

    with fresh() as c:
        assert queue_name in c.queue_names()  # read: retried on the good server
    with fresh() as c, pytest.raises(CallFailed):
        c.enqueue(queue_name, [Job(b"maybe")])  # plain enqueue: may have run, not retried
    with fresh() as c, pytest.raises(CallFailed):
        c.dequeue(queue_name, 1)  # would claim jobs whose reply could be lost again
    with fresh() as c:
        keyed = c.enqueue(queue_name, [Job(b"once")], idempotency_key="k-1")  # keyed: retried
        assert c.enqueue(queue_name, [Job(b"once")], idempotency_key="k-1") == keyed
    with fresh() as c:
        [job] = c.dequeue(queue_name, 1, dry_run=True)
        c.ack(queue_name, succeeded=[Ack(job.descriptor)])  # ACK: retried (a stale repeat changes nothing)
    assert dropper.requests >= 5
    assert service.count(queue_name, "pending") == 1


def test_connect_switches_by_configuration(server: ThriftServer, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(shards=parse_shards("m1=memory://"), control_url="memory://connect-test",
                        servers=(f"127.0.0.1:{server.port}",))
    with connect(settings, source="app") as remote:
        assert isinstance(remote, ThriftClient)
        assert isinstance(remote.queue_names(), set)
    monkeypatch.setenv("PINLATER_SERVERS", f"127.0.0.1:{server.port}, 127.0.0.1:1")
    env = Settings.from_env()
    assert env.servers == (f"127.0.0.1:{server.port}", "127.0.0.1:1")
    with connect(source="app") as remote:
        assert isinstance(remote, ThriftClient)
    monkeypatch.delenv("PINLATER_SERVERS")
    local = connect(Settings(shards=parse_shards("m1=memory://"), control_url="memory://connect-test"))
    assert isinstance(local, JobService)
    local.close()
