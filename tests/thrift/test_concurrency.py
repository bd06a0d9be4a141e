"""Many clients at once: 200 open connections, and a slow call that blocks
nobody but its own caller. Graceful stop lets calls in flight finish."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pinlater import Job
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.handler import Handler
from pinlater.thrift.server import ThriftServer
from tests.support.waits import wait_for
from tests.thrift.rawwire import closed_by_server

CONNECTIONS = 200
SLOW_S = 30.0


class SlowHandler(Handler):
    """getJobCount with the body regex "__slow__" runs until ``release`` is
    set (at most SLOW_S seconds)."""

    def __init__(self, service: JobService) -> None:
        super().__init__(service)
        self.slow_started = threading.Event()
        self.release = threading.Event()

    def getJobCount(self, context: Any, request: Any) -> int:  # noqa: N802
        if request is not None and request.bodyRegexToMatch == "__slow__":
            self.slow_started.set()
            self.release.wait(SLOW_S)
            return 42
        return super().getJobCount(context, request)


@pytest.fixture
def slow(service: JobService, start_server: Callable[..., ThriftServer]) -> tuple[ThriftServer, SlowHandler]:
    handler = SlowHandler(service)
    # Every client here is 127.0.0.1: lift the per-address cap above the 201.
    return start_server(service, handler=handler, max_connections_per_client=CONNECTIONS + 8), handler


def test_200_connections_and_a_slow_call_blocks_nobody(
    slow: tuple[ThriftServer, SlowHandler], queue_name: str
) -> None:
    server, handler = slow
    address = [f"127.0.0.1:{server.port}"]
    with ThriftClient(address, source="setup") as c:
        c.create_queue(queue_name)

    slow_client = ThriftClient(address, source="slow", timeout_s=SLOW_S + 10, retries=0)
    handler.release.clear()
    with ThreadPoolExecutor(1) as one:
        slow_call = one.submit(slow_client.count, queue_name, "pending", body_regex="__slow__")
        assert handler.slow_started.wait(5)
        started = time.monotonic()

        # 200 clients, each holding its own connection open, all calling at once.
        clients = [ThriftClient(address, source=f"c{i}", timeout_s=10, retries=0) for i in range(CONNECTIONS)]
        barrier = threading.Barrier(CONNECTIONS)

        def work(i: int) -> float:
            c = clients[i]
            c.queue_names()  # connect
            barrier.wait(10)
            t0 = time.monotonic()
            [d] = c.enqueue(queue_name, [Job(f"job {i}".encode())])
            assert d in c.lookup([d])
            return time.monotonic() - t0

        with ThreadPoolExecutor(CONNECTIONS) as pool:
            latencies = list(pool.map(work, range(CONNECTIONS)))
        done_at = time.monotonic() - started
        assert server.stats.connections_open >= CONNECTIONS + 1
        # Everyone was served while the slow call was still running.
        assert not slow_call.done() and done_at < SLOW_S / 2, f"others waited for the slow call: {done_at:.2f}s"
        assert max(latencies) < SLOW_S / 2
        handler.release.set()
        assert slow_call.result(timeout=10) == 42
        for c in clients:
            c.close()
    slow_client.close()
    with ThriftClient(address, source="check") as c:
        assert c.count(queue_name, "pending") == CONNECTIONS


def test_graceful_stop_finishes_calls_in_flight(
    memory_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    handler = SlowHandler(memory_service)
    server = start_server(memory_service, handler=handler)
    address = [f"127.0.0.1:{server.port}"]
    idle = ThriftClient(address, source="idle", retries=0)
    idle.create_queue(queue_name)  # leaves an idle pooled connection open
    busy = ThriftClient(address, source="busy", timeout_s=SLOW_S + 10, retries=0)
    with ThreadPoolExecutor(1) as one:
        in_flight = one.submit(busy.count, queue_name, "pending", body_regex="__slow__")
        assert handler.slow_started.wait(5)
        stopper = threading.Thread(target=server.stop, kwargs={"grace_s": SLOW_S})
        stopper.start()
        time.sleep(0.5)
        with pytest.raises(OSError):  # no longer accepting
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        assert not in_flight.done()
        handler.release.set()
        assert in_flight.result(timeout=10) == 42  # the reply still came
        stopper.join(10)
        assert not stopper.is_alive()
    assert server.stats.connections_open == 0
    idle.close()
    busy.close()


class _HeldListener(socket.socket):
    """A listening socket whose next ``accept``, once ``hold`` is set, waits
    for ``release``: it lets a test accept a connection at a chosen moment."""

    def __init__(self) -> None:
        super().__init__(fileno=socket.create_server(("127.0.0.1", 0)).detach())
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def accept(self) -> tuple[socket.socket, Any]:
        if self.hold.is_set():
            self.hold.clear()
            self.holding.set()
            assert self.release.wait(10)
        return super().accept()


def test_a_connection_accepted_while_stopping_is_closed_and_the_stop_completes(
    memory_service: JobService, start_server: Callable[..., ThriftServer]
) -> None:
    """The accept loop may take one more connection after the thread that
    starts connections has seen the stop: it is closed, never left half made."""
    listener = _HeldListener()
    server = start_server(memory_service, listener=listener)
    listener.hold.set()
    assert listener.holding.wait(5)  # the accept loop waits inside its next accept
    client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    server.request_stop()
    wait_for(lambda: not any(t.name == "pinlater-starter" for t in threading.enumerate()), timeout_s=5)
    listener.release.set()  # accepted after the starter is gone
    server.stop(grace_s=5)
    assert closed_by_server(client, timeout_s=5)
    assert server.stats.connections_open == 0
    client.close()


def test_connection_limit_sheds_idle_connections_then_refuses(
    memory_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    """All slots taken: a new connection takes the slot of the longest idle
    one; when none is idle (every connection is in a call) it is refused."""
    handler = SlowHandler(memory_service)
    server = start_server(memory_service, handler=handler, max_connections=3)
    address = [f"127.0.0.1:{server.port}"]
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    time.sleep(0.3)
    newcomer = ThriftClient(address, source="new", retries=0)
    newcomer.create_queue(queue_name)  # got in: one held connection was shed
    assert closed_by_server(held[0], timeout_s=3)  # the longest idle
    assert server.stats.connections_shed == 1 and server.stats.connections_refused == 0

    # Three slow calls in flight hold every slot: nothing can be shed.
    handler.release.clear()
    busy = [ThriftClient(address, source=f"busy{i}", timeout_s=SLOW_S + 10, retries=0) for i in range(3)]
    newcomer.close()
    for s in held:
        s.close()
    time.sleep(0.3)
    with ThreadPoolExecutor(3) as pool:
        calls = [pool.submit(c.count, queue_name, "pending", body_regex="__slow__") for c in busy]
        deadline = time.monotonic() + 5
        while server.stats.in_flight < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=3)
        assert extra.recv(1) == b""  # closed at once
        extra.close()
        assert server.stats.connections_refused == 1
        handler.release.set()
        assert [c.result(timeout=10) for c in calls] == [42, 42, 42]
    for c in busy:
        c.close()


def test_one_client_shared_by_threads(
    memory_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    server = start_server(memory_service)
    client = ThriftClient([f"127.0.0.1:{server.port}"], source="shared", pool_size=4)
    client.create_queue(queue_name)

    def work(i: int) -> None:
        for j in range(20):
            [d] = client.enqueue(queue_name, [Job(f"{i}-{j}".encode())])
            assert client.lookup([d], include_body=True)[d].body == f"{i}-{j}".encode()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(work, range(16)))
    assert client.count(queue_name, "pending") == 16 * 20
    assert all(len(ep.idle) <= 4 for ep in client._pool.endpoints)
    client.close()


def test_a_pooled_connection_the_server_closed_is_not_used_for_a_plain_enqueue(
    memory_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    """A plain enqueue is never retried once sent (it may have run), so the
    pool must see that the server closed an idle connection before sending
    on it, and take a new one."""
    server = start_server(memory_service, idle_timeout_s=0.2)
    with ThriftClient([f"127.0.0.1:{server.port}"], source="pooled", retries=0) as client:
        client.create_queue(queue_name)  # leaves one connection in the pool
        deadline = time.monotonic() + 10
        while server.stats.connections_open and time.monotonic() < deadline:
            time.sleep(0.05)  # the server's idle timeout closes it
        assert server.stats.connections_open == 0
        [descriptor] = client.enqueue(queue_name, [Job(b"after the close")])
    assert memory_service.lookup([descriptor], include_body=True)[descriptor].body == b"after the close"
