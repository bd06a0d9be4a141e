"""Hostile clients must not starve the server: slow-loris frames, floods of
idle connections from one or many addresses, and partial frames sent to
fill the server's memory. Each test runs ``pinlater server`` as a process
(Redis backend), runs the hostile load from other loopback addresses
(127.0.0.2 and up: Linux routes all of 127.0.0.0/8 to lo), and meanwhile
a normal client on 127.0.0.1 keeps calling: every call must succeed within
1 s. Loads are bounded in count and time and stop by themselves."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pinlater import Job
from pinlater.kit.tls import ClientTls
from pinlater.thrift.client import ThriftClient
from tests.support.call_loop import CallLoop
from tests.support.server_process import ServerProcess, server_env
from tests.support.waits import wait_for
from tests.thrift.rawwire import call_frame, ctx, length_prefix

MiB = 1024 * 1024
NORMAL_BOUND_S = 1.0


@pytest.fixture
def start(servers: None) -> Iterator[Any]:
    started: list[ServerProcess] = []

    def run(*args: str, **env: str) -> ServerProcess:
        p = ServerProcess("--no-monitor", *args, env=server_env(**env))
        started.append(p)
        return p

    yield run
    for p in started:
        p.close()


@pytest.fixture(autouse=True)
def enough_file_descriptors() -> None:
    """The hostile sockets live in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192 <= hard or (hard == resource.RLIM_INFINITY and soft < 8192):
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, hard))


class NormalClient(CallLoop):
    """A well-behaved client on 127.0.0.1 calling in a loop, in a thread:
    alternately on its pooled connection and on a fresh connection (a new
    client getting in)."""

    def __init__(self, port: int, queue: str, tls: ClientTls | None = None) -> None:
        super().__init__(self._one, NORMAL_BOUND_S)
        self.address = [f"127.0.0.1:{port}"]
        self.tls = tls
        self.queue = queue
        self.pooled = ThriftClient(self.address, source="normal", timeout_s=5, retries=0, tls=tls)
        self.pooled.create_queue(queue)

    def close(self) -> None:
        self.pooled.close()

    def _one(self, i: int) -> str:
        if i % 2:
            self.pooled.enqueue(self.queue, [Job(b"normal")])
            return "pooled"
        with ThriftClient(self.address, source="normal-new", timeout_s=5, retries=0, tls=self.tls) as fresh:
            fresh.count(self.queue, "pending")
        return "new connection"


def open_from(source_ip: str, port: int, n: int, deadline: float) -> list[socket.socket]:
    """Up to ``n`` connections from ``source_ip`` (bounded by ``deadline``);
    the server may accept and close them, they are kept anyway."""
    socks: list[socket.socket] = []
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source_ip, 0))
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def server_closed(sock: socket.socket) -> bool:
    sock.settimeout(0)  # with a timeout, Python would wait for data first
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


# -- (a) a frame must arrive whole within the frame timeout --------------------------------
def test_slow_loris_is_closed_within_the_frame_timeout(start: Any, queue_name: str) -> None:
    """One byte a second kept every connection open forever when the
    timeout restarted on each recv. Here 40 such connections (and 10 that
    trickle an oversized frame the server drains) are each closed within
    the 2 s frame timeout, and the normal client is served meanwhile."""
    server = start("--max-frame-bytes", "100000", PINLATER_SERVER_FRAME_TIMEOUT_S="2")
    frame = call_frame("getJobCount", context=ctx())
    with NormalClient(server.port, queue_name) as normal:
        loris: list[tuple[socket.socket, bytes]] = []
        for i in range(50):
            [s] = open_from(f"127.0.0.{3 + i % 2}", server.port, 1, time.monotonic() + 5)
            # 40 with a well-formed frame, 10 with a frame over the limit (drained, not buffered).
            data = frame if i < 40 else length_prefix(200_000) + frame[4:]
            s.sendall(data[:5])  # the length and one byte: the frame has begun
            loris.append((s, data[5:]))
        started = time.monotonic()
        closed_at: dict[int, float] = {}
        sent = 0
        while len(closed_at) < len(loris) and time.monotonic() - started < 8:  # bounded
            time.sleep(1.0)
            for i, (s, rest) in enumerate(loris):
                if i in closed_at:
                    continue
                if server_closed(s):
                    closed_at[i] = time.monotonic() - started
                    continue
                with contextlib.suppress(OSError):
                    s.send(rest[sent : sent + 1])
            sent += 1
        worst = normal.check(min_calls=20)
        for s, _ in loris:
            s.close()
    still_open = len(loris) - len(closed_at)
    assert still_open == 0, f"{still_open} slow connections still open after {time.monotonic() - started:.0f}s"
    assert max(closed_at.values()) < 4.0
    assert server.stats()["frame_timeouts"] >= len(loris)
    print(f"slow loris: closed after {max(closed_at.values()):.1f}s at most; "
          f"normal calls at most {worst * 1000:.0f} ms")


# -- (b) connections per client address, and shedding idle ones ------------------------------
def test_one_address_cannot_take_every_connection(start: Any, queue_name: str) -> None:
    """2,000 idle connections from one address took all 1,024 slots; now
    that address holds at most 64 (each new one past them takes the slot of
    its own oldest idle one) and the normal client keeps getting in."""
    server = start(PINLATER_SERVER_MAX_CONNECTIONS="1024", PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT="64")
    with NormalClient(server.port, queue_name) as normal:
        time.sleep(0.3)
        hostile = open_from("127.0.0.2", server.port, 2000, time.monotonic() + 20)
        time.sleep(1.5)  # the normal client keeps calling while they are held
        worst = normal.check(min_calls=10)
        stats = server.stats()
        open_hostile = sum(not server_closed(s) for s in hostile)
        close_all(hostile)
    assert len(hostile) == 2000
    assert stats["connections_shed"] + stats["connections_over_client_limit"] >= 2000 - 64
    assert stats["connections_open"] <= 64 + 2 and open_hostile <= 64
    print(f"2000 from one address: normal calls at most {worst * 1000:.0f} ms")


def test_dead_connections_do_not_lock_their_address_out(start: Any, queue_name: str) -> None:
    """An address's 64 connections left open by peers that will never use
    them (a client behind a black hole, which cannot close them): a new
    client from that address is served, in the slot of the oldest."""
    server = start(PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT="64")
    dead = open_from("127.0.0.2", server.port, 64, time.monotonic() + 20)
    time.sleep(0.5)
    fresh = open_from("127.0.0.2", server.port, 1, time.monotonic() + 5)
    try:
        assert len(dead) == 64 and len(fresh) == 1
        wait_for(lambda: sum(server_closed(s) for s in dead) == 1, timeout_s=5, what="a dead connection shed")
        assert not server_closed(fresh[0])
        stats = server.stats()
        assert stats["connections_shed"] == 1 and stats["connections_over_client_limit"] == 0
    finally:
        close_all(dead + fresh)


def test_many_addresses_over_the_connection_limit(start: Any, queue_name: str) -> None:
    """1,200 idle connections from 20 addresses (60 each, under the
    per-client cap) are more than the 1,024 slots: idle connections of the
    addresses holding the most are shed to let new clients in."""
    server = start(PINLATER_SERVER_MAX_CONNECTIONS="1024", PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT="64")
    with NormalClient(server.port, queue_name) as normal:
        time.sleep(0.3)
        deadline = time.monotonic() + 20
        with ThreadPoolExecutor(4) as pool:
            groups = list(pool.map(lambda i: open_from(f"127.0.1.{i}", server.port, 60, deadline), range(1, 21)))
        time.sleep(1.5)
        worst = normal.check(min_calls=10)
        stats = server.stats()
        for g in groups:
            close_all(g)
    assert sum(len(g) for g in groups) == 1200
    assert stats["connections_shed"] >= 1200 - 1024
    assert stats["connections_open"] <= 1024
    print(f"1200 from 20 addresses: normal calls at most {worst * 1000:.0f} ms, {stats['connections_shed']} shed")


# -- (c) bytes buffered for partial frames -----------------------------------------------------
def test_partial_frames_cannot_exhaust_memory(start: Any, queue_name: str) -> None:
    """40 connections each send 16 MiB of a 17 MB frame and stop: the
    server buffered all of it (704 MiB). With a budget of three such frames
    its RSS stays near baseline + budget; the normal client's small calls,
    and a 300 KB enqueue that needs a stalled frame shed to fit, are served
    within 1 s meanwhile."""
    budget = 3 * 17_000_000 + 200_000
    server = start("--max-frame-bytes", str(20_000_000), PINLATER_SERVER_MAX_BUFFERED_BYTES=str(budget),
                   PINLATER_SERVER_FRAME_TIMEOUT_S="20", PINLATER_MAX_BODY_BYTES=str(MiB))
    frame_size = 17_000_000
    head = length_prefix(frame_size) + call_frame("enqueueJobs", context=ctx())[4:40]
    payload = head + b"\0" * (16 * MiB - len(head))
    peak = 0
    with NormalClient(server.port, queue_name) as normal:
        time.sleep(0.5)
        baseline = server.rss_bytes()
        stop = threading.Event()

        def attack(i: int) -> socket.socket | None:
            opened = open_from(f"127.0.2.{1 + i % 4}", server.port, 1, time.monotonic() + 5)
            if not opened:
                return None
            [s] = opened
            s.settimeout(10)
            with contextlib.suppress(OSError):
                s.sendall(payload)  # then holds the frame unfinished
            return s

        def watch() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, server.rss_bytes())
                stop.wait(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        big = ThriftClient([f"127.0.0.1:{server.port}"], source="big", timeout_s=10, retries=0)
        try:
            with ThreadPoolExecutor(40) as pool:
                attackers = pool.map(attack, range(40))
                time.sleep(2.0)
                t0 = time.monotonic()
                big.enqueue(queue_name, [Job(b"y" * 300_000)])
                big_s = time.monotonic() - t0
                socks = [s for s in attackers if s is not None]
            time.sleep(1.0)
            worst = normal.check(min_calls=20)
        finally:
            stop.set()
            watcher.join()
            big.close()
        for s in socks:
            s.close()
    growth = peak - baseline
    print(f"partial frames: RSS baseline {baseline / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB "
          f"(+{growth / MiB:.0f}); normal calls at most {worst * 1000:.0f} ms; 300 KB enqueue {big_s * 1000:.0f} ms")
    assert big_s < NORMAL_BOUND_S
    assert growth < budget + 32 * MiB, f"RSS grew by {growth / MiB:.0f} MiB with a {budget / MiB:.0f} MiB budget"
    stats = server.stats()
    assert stats["frames_over_budget"] > 0 and stats["connections_shed"] > 0

