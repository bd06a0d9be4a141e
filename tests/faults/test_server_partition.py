"""A Thrift server's host cut off from its client under a steady stream of
enqueues: two servers on hosts of their own (network namespaces), the
client on a third naming both (``PINLATER_SERVERS``), one shard and a
control store on two more. The partition drops packets silently both ways,
so the client learns of it only by its timeouts (``PINLATER_CLIENT_TIMEOUT_S``,
connecting: 2 s).

Each enqueue carries an idempotency key, so a call whose answer the
partition swallowed is retried on the other server, and answered with the
first call's descriptor if the first had been applied. The ledger at the
end: 0 lost, 0 extra, no job twice; every call succeeded; the stream went
on through the other server.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.hosts import (
    FAULT_S,
    SERVER_PORT,
    finish,
    python,
    redis_hosts,
    store_env,
    through_fault,
    wait_answering,
)
from tests.support.topology import Topology

CLIENT_TIMEOUT_S = 1.0
# The longest a call can take: its answer lost (the call timeout), then a
# connect to the cut-off server (2 s) before the other server takes it,
# with the client's backoff between tries.
LATENCY_BOUND_S = CLIENT_TIMEOUT_S + 2.0 + 2.0


@pytest.fixture
def topo() -> Iterator[Topology]:
    with Topology(["w1", "srv1", "srv2", "ctl", "r1"]) as topology:
        redis_hosts(topology, ["ctl", "r1"], "srv1")
        yield topology


@pytest.mark.serial
def test_a_cut_off_server_loses_no_enqueue_and_makes_none_twice(topo: Topology, tmp_path: Path) -> None:
    stores = store_env(topo, ["r1"], "ctl")
    finish(python(topo, "srv1", stores, "pinlater.cli", "migrate"), 60)
    for host in ("srv1", "srv2"):
        # Plain TCP off the loopback needs saying so: these hosts' network is
        # the test's own namespaces, reachable from nowhere else.
        server = stores | {"PINLATER_SERVER_HOST": topo.address(host), "PINLATER_SERVER_INSECURE": "yes"}
        python(topo, host, server, "pinlater.cli", "server", "--port", str(SERVER_PORT), "--metrics-port", "-1",
               "--no-monitor", log=tmp_path / f"{host}.log")
    for host in ("srv1", "srv2"):
        wait_answering(topo, "w1", host, SERVER_PORT)
    client = stores | {"PINLATER_SERVERS": ",".join(f"{topo.address(h)}:{SERVER_PORT}" for h in ("srv1", "srv2")),
                       "PINLATER_CLIENT_TIMEOUT_S": str(CLIENT_TIMEOUT_S)}
    ledger, window = through_fault(topo, client, lambda: topo.partition("srv1", ["w1"]), tmp_path, keyed=True)
    report = ledger.summary(f"thrift server partitioned from its client {FAULT_S:.0f} s")
    print(report)
    assert ledger.lost() == [] and ledger.extra() == [] and ledger.twice() == [], report
    assert len(ledger.acked) == len(ledger.calls), report
    assert len(ledger.between(window.cut, window.healed)) > FAULT_S * 20, report
    assert ledger.worst_latency_s() < LATENCY_BOUND_S, report
