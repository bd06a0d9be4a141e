"""Hostile clients of a TLS port: handshakes trickled a byte a second,
1,000 half-open handshakes, and garbage where a ClientHello should be. As
in ``test_hostile``: ``pinlater server`` as a process with TLS, client
certificates and roles, the load from other loopback addresses, and a
normal TLS client on 127.0.0.1 whose every call must succeed within 1 s.
Loads are bounded in count and time and stop by themselves."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.server_process import ServerProcess, server_env
from tests.support.tls import Certs, make_certs
from tests.thrift.test_hostile import NormalClient, close_all, enough_file_descriptors, open_from, server_closed

__all__ = ["enough_file_descriptors"]  # the autouse fixture, used here too


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def start(servers: None, certs: Certs) -> Iterator[Any]:
    started: list[ServerProcess] = []

    def run(**env: str) -> ServerProcess:
        p = ServerProcess("--no-monitor", env=server_env(**certs.server_env(), **env))
        started.append(p)
        return p

    yield run
    for p in started:
        p.close()


def client_hello(certs: Certs) -> bytes:
    """The first flight of a real TLS client (its ClientHello record)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = certs.client("tls-admin").context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16
    return hello


def test_trickled_handshakes_are_closed_within_the_frame_timeout(start: Any, certs: Certs, queue_name: str) -> None:
    server = start(PINLATER_SERVER_FRAME_TIMEOUT_S="2")
    hello = client_hello(certs)
    with NormalClient(server.port, queue_name, tls=certs.client("tls-admin")) as normal:
        slow = [s for i in range(40) for s in open_from(f"127.0.0.{3 + i % 2}", server.port, 1,
                                                        time.monotonic() + 5)]
        for s in slow:
            s.sendall(hello[:1])
        started = time.monotonic()
        closed_at: dict[int, float] = {}
        sent = 1
        while len(closed_at) < len(slow) and time.monotonic() - started < 8:  # bounded
            time.sleep(1.0)
            for i, s in enumerate(slow):
                if i not in closed_at and server_closed(s):
                    closed_at[i] = time.monotonic() - started
                elif i not in closed_at:
                    with contextlib.suppress(OSError):
                        s.send(hello[sent : sent + 1])
            sent += 1
        worst = normal.check(min_calls=20)
        close_all(slow)
    assert len(slow) == 40 and len(closed_at) == 40, f"{40 - len(closed_at)} still open"
    assert max(closed_at.values()) < 4.0
    assert server.stats()["tls_handshake_failures"] >= 40
    print(f"trickled handshakes: closed after {max(closed_at.values()):.1f}s at most; "
          f"normal calls at most {worst * 1000:.0f} ms")


def test_a_thousand_half_open_handshakes(start: Any, certs: Certs, queue_name: str) -> None:
    """1,000 connections from 20 addresses each send the first 100 bytes of
    a ClientHello and stop: each holds a thread in its handshake, and the
    normal client keeps getting in."""
    server = start(PINLATER_SERVER_MAX_CONNECTIONS="1024", PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT="64")
    hello = client_hello(certs)[:100]
    with NormalClient(server.port, queue_name, tls=certs.client("tls-admin")) as normal:
        time.sleep(0.3)
        deadline = time.monotonic() + 20

        def half_open(i: int) -> list[Any]:
            socks = open_from(f"127.0.3.{i}", server.port, 50, deadline)
            for s in socks:
                with contextlib.suppress(OSError):
                    s.sendall(hello)
            return socks

        with ThreadPoolExecutor(4) as pool:
            groups = list(pool.map(half_open, range(1, 21)))
        time.sleep(1.5)
        worst = normal.check(min_calls=10)
        stats = server.stats()
        for g in groups:
            close_all(g)
    assert sum(len(g) for g in groups) == 1000
    assert stats["connections_open"] >= 900, "the half-open handshakes were held"
    print(f"1000 half-open handshakes: normal calls at most {worst * 1000:.0f} ms")


# A whole TLS handshake record (type 22, TLS 1.0 record version, its length)
# holding one whole ClientHello (type 1, its length) of 591 random bytes.
GARBAGE_RECORD = b"\x16\x03\x01" + (595).to_bytes(2, "big") + b"\x01" + (591).to_bytes(3, "big")


def closed_after_any_alert(sock: socket.socket) -> bool:
    """Whether the server closed the connection, reading past what it sent
    first: a TLS server may answer a bad hello with an alert, then close."""
    sock.settimeout(0)
    try:
        while chunk := sock.recv(4096):
            del chunk
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


@pytest.mark.parametrize("first", [GARBAGE_RECORD, b"\x00"], ids=["handshake record of garbage", "plain garbage"])
def test_garbage_instead_of_a_client_hello(start: Any, certs: Certs, queue_name: str, first: bytes) -> None:
    server = start()
    with NormalClient(server.port, queue_name, tls=certs.client("tls-admin")) as normal:
        junk = [s for i in range(200) for s in open_from(f"127.0.4.{1 + i % 10}", server.port, 1,
                                                         time.monotonic() + 10)]
        for s in junk:
            with contextlib.suppress(OSError):
                s.sendall(first + os.urandom(591 if first == GARBAGE_RECORD else 600))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(closed_after_any_alert(s) for s in junk):
            time.sleep(0.1)
        assert all(closed_after_any_alert(s) for s in junk), "garbage connections left open"
        time.sleep(1.0)  # the normal client calls on meanwhile
        worst = normal.check(min_calls=5)
        close_all(junk)
    stats = server.stats()
    counter = "tls_handshake_failures" if first == GARBAGE_RECORD else "tls_plaintext_refused"
    assert stats[counter] == len(junk) == 200
    print(f"garbage hellos: all closed; normal calls at most {worst * 1000:.0f} ms")

