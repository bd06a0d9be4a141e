"""The HBase panel's probes of both Thrift servers of a cluster, with no
HBase: fake Thrift1 and Thrift2 servers (thriftpy2 processors behind a plain
``socketserver``), a port that accepts and never answers (black-holed) and
one that refuses. No test here needs Redis, MariaDB or HBase."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from thriftpy2 import protocol, transport
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TTransportException

from tasks.feeds.panel import hbase_view
from tasks.feeds.queues import WRITE_PRIMARY
from tasks.hbase import ClusterPair, HBaseSettings
from tasks.hbase.health import (
    ClusterHealth,
    HBaseHealth,
    ServerHealth,
    bounded,
    probe_thrift1,
    probe_thrift2,
)
from tasks.hbase.idl import THRIFT1, THRIFT2
from tasks.hbase.settings import Address
from tasks.hbase.thrift2 import PoolLimits
from tests.support.waits import wait_for

TIMEOUT_S = 1.0  # the probes' timeout here: a fake answers in about a millisecond
# Untyped in thriftpy2.
_Socket: Any = transport.TSocket
_Buffered: Any = transport.TBufferedTransport
_Binary: Any = protocol.TBinaryProtocol


class _ServeThrift(socketserver.BaseRequestHandler):
    server: FakeThrift

    def handle(self) -> None:
        wire = _Binary(_Buffered(_Socket(sock=self.request)))
        with contextlib.suppress(TTransportException, OSError):  # the client hung up
            while True:
                self.server.processor.process(wire, wire)


class FakeThrift(socketserver.ThreadingTCPServer):
    """A Thrift server of ``service`` whose calls ``handler`` answers."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, service: Any, handler: object) -> None:
        self.processor = TProcessor(service, handler)
        super().__init__(("127.0.0.1", 0), _ServeThrift)

    @property
    def address(self) -> Address:
        return Address("127.0.0.1", self.server_address[1])


class Thrift1Handler:
    def getTableNames(self) -> list[bytes]:  # noqa: N802  (Thrift's name)
        return [b"following_feed"]


class Thrift2Handler:
    def __init__(self, kind: int = THRIFT2.TThriftServerType.TWO) -> None:
        self.kind = kind

    def getThriftServerType(self) -> int:  # noqa: N802  (Thrift's name)
        return self.kind


@contextlib.contextmanager
def serving(service: Any, handler: object) -> Iterator[Address]:
    with FakeThrift(service, handler) as server:
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield server.address
        finally:
            server.shutdown()
            thread.join(timeout=5)


@contextlib.contextmanager
def black_hole() -> Iterator[Address]:
    """Accepts connections (the kernel's backlog does) and never reads them."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield Address("127.0.0.1", listener.getsockname()[1])


@contextlib.contextmanager
def refusing() -> Iterator[Address]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        yield Address("127.0.0.1", sock.getsockname()[1])


def settings(thrift1: Address, thrift2: Address, standby1: Address, standby2: Address) -> HBaseSettings:
    return HBaseSettings(primary=thrift1, primary_thrift2=thrift2, standby=standby1, standby_thrift2=standby2,
                         call_timeout_s=30.0, pool_wait_s=30.0, pool_size=8, attempts=3)


@contextlib.contextmanager
def primary(thrift1: Address, thrift2: Address) -> Iterator[ClusterPair]:
    """The probe's pools of a primary at these addresses (a standby nobody probes)."""
    with refusing() as nowhere:
        pair = ClusterPair.from_settings(bounded(settings(thrift1, thrift2, nowhere, nowhere), TIMEOUT_S))
        try:
            yield pair
        finally:
            pair.close()


def timed(call: Callable[[], ServerHealth]) -> tuple[ServerHealth, float]:
    started = time.monotonic()
    health = call()
    return health, time.monotonic() - started


def test_the_probe_bounds_both_servers_of_a_cluster() -> None:
    with refusing() as a, refusing() as b:
        tight = bounded(settings(a, b, a, b), TIMEOUT_S)
        limits = PoolLimits(size=1, call_timeout_s=TIMEOUT_S, pool_wait_s=TIMEOUT_S, attempts=1)
        assert (tight.pool_size, tight.call_timeout_s, tight.pool_wait_s, tight.attempts) == (
            limits.size, limits.call_timeout_s, limits.pool_wait_s, limits.attempts)
        for pool in ClusterPair.from_settings(tight):
            assert PoolLimits(pool.size, pool.call_timeout_s, pool.pool_wait_s, pool.attempts) == limits
            assert pool.thrift2.limits == limits
        # A call timeout already below the probe's is kept.
        assert bounded(HBaseSettings(call_timeout_s=0.3), TIMEOUT_S).call_timeout_s == 0.3


def test_servers_that_answer_are_up() -> None:
    with serving(THRIFT1.Hbase, Thrift1Handler()) as thrift1, \
            serving(THRIFT2.THBaseService, Thrift2Handler()) as thrift2, primary(thrift1, thrift2) as pair:
        for probe, address in ((probe_thrift1, thrift1), (probe_thrift2, thrift2)):
            for _ in range(2):  # a new connection, then the pooled one
                health = probe(pair.primary)
                assert health.address == str(address) and health.reachable is True and health.error is None
                assert health.latency_ms is not None and 0 <= health.latency_ms < TIMEOUT_S * 1000
                assert health.checked_at_ms is not None and abs(time.time() * 1000 - health.checked_at_ms) < 5000


def test_a_thrift1_port_given_as_thrift2_is_down_in_one_line() -> None:
    with serving(THRIFT2.THBaseService, Thrift2Handler(THRIFT2.TThriftServerType.ONE)) as wrong, \
            refusing() as thrift1, primary(thrift1, wrong) as pair:
        health = probe_thrift2(pair.primary)
    assert health.reachable is False and health.latency_ms is None
    assert health.error == (f"hbase primary ({wrong}): server type: "
                            "not a Thrift2 server: getThriftServerType() answers ONE (a Thrift1 port?)")


def test_a_black_holed_thrift2_port_is_down_within_the_probe_timeout() -> None:
    with black_hole() as hole, refusing() as thrift1, primary(thrift1, hole) as pair:
        health, took = timed(lambda: probe_thrift2(pair.primary))
    assert 0.9 * TIMEOUT_S <= took < TIMEOUT_S + 1
    assert health.reachable is False and health.latency_ms is None and health.error is not None
    assert health.error.startswith(f"hbase primary ({hole}): server type: timed out"), health.error
    assert "\n" not in health.error


def test_a_refused_thrift2_port_is_down_at_once() -> None:
    with refusing() as closed, primary(closed, closed) as pair:
        health, took = timed(lambda: probe_thrift2(pair.primary))
    assert took < TIMEOUT_S
    assert health.reachable is False and health.error is not None
    assert health.error.startswith(f"hbase primary ({closed}): server type: "), health.error
    assert "Could not connect" in health.error or "refused" in health.error



def test_a_black_holed_thrift2_never_delays_thrift1_nor_a_reader() -> None:
    with serving(THRIFT1.Hbase, Thrift1Handler()) as thrift1, black_hole() as hole, refusing() as closed:
        health = HBaseHealth(settings(thrift1, hole, thrift1, closed), interval_s=0.05, timeout_s=TIMEOUT_S)
        before = health.clusters()
        assert [(c.reachable, c.thrift2.reachable) for c in before] == [(None, None), (None, None)]
        assert [c.thrift2.address for c in before] == [str(hole), str(closed)]
        started = time.monotonic()
        health.start()
        try:
            # Thrift1 answers, and the refused Thrift2 reports, while the primary's Thrift2 probe
            # still waits on the black hole. Each probe runs on its own thread, so wait for both.
            wait_for(
                lambda: all(c.reachable for c in health.clusters()) and health.clusters()[1].thrift2.reachable is False,
                "both Thrift1 up and the standby's Thrift2 refused",
                timeout_s=TIMEOUT_S / 2,
                interval_s=0.02,
            )
            assert time.monotonic() - started < 0.9 * TIMEOUT_S
            primary_now, standby_now = health.clusters()
            assert primary_now.thrift2.reachable is None and standby_now.thrift2.reachable is False
            assert primary_now.error is None and primary_now.latency_ms is not None
            # ...and keeps being probed at its own pace.
            first = primary_now.checked_at_ms
            wait_for(lambda: health.clusters()[0].checked_at_ms != first, "a newer Thrift1 probe", TIMEOUT_S / 2, 0.02)

            wait_for(lambda: health.clusters()[0].thrift2.reachable is False, "Thrift2 down", TIMEOUT_S + 1, 0.02)
            assert time.monotonic() - started >= 0.9 * TIMEOUT_S
            primary_now = health.clusters()[0]
            assert primary_now.reachable is True and primary_now.thrift2.error is not None
            assert primary_now.thrift2.error.startswith(f"hbase primary ({hole}): server type: timed out")
            # Readers only read the last results.
            reads_started = time.monotonic()
            for _ in range(100):
                health.clusters()
            assert time.monotonic() - reads_started < 0.1
        finally:
            closing = time.monotonic()
            health.close()
        assert time.monotonic() - closing < TIMEOUT_S + 1.5


def test_unusable_settings_leave_both_servers_unknown() -> None:
    health = HBaseHealth.from_env({"PINLATER_HBASE_STANDBY_THRIFT2": "nonsense"})
    assert health.settings_error == ("PINLATER_HBASE_STANDBY_THRIFT2: must look like HOST:PORT with a port "
                                     "from 1 to 65535, got 'nonsense'")
    health.start()
    try:
        assert health.clusters() == [ClusterHealth("primary", None), ClusterHealth("standby", None)]
        assert health.clusters()[0].thrift2 == ServerHealth()
    finally:
        health.close()


SNAPSHOT = {"taken_at_ms": 1_700_000_000_000, "partial": False, "queues": []}


def test_the_panel_has_each_clusters_thrift2_server() -> None:
    with refusing() as a, refusing() as b, refusing() as c, refusing() as d:
        health = HBaseHealth(settings(a, b, c, d))  # not started: nothing probed
        body = json.loads(json.dumps(hbase_view(SNAPSHOT, health)))
        health.close()
    unprobed = {"reachable": None, "latency_ms": None, "error": None, "checked_at_ms": None}
    primary_c, standby_c = body["clusters"]
    assert primary_c == {"name": "primary", "address": str(a), **unprobed,
                         "thrift2": {"address": str(b), **unprobed},
                         "trimming": dict.fromkeys(["mode", "cap", "cells_dropped", "rows_trimmed",
                                                    "compactions_trimmed", "compactions_passed", "error",
                                                    "checked_at_ms"]),
                         "write_queue": WRITE_PRIMARY, "backlog": primary_c["backlog"]}
    assert standby_c["address"] == str(c) and standby_c["thrift2"] == {"address": str(d), **unprobed}
