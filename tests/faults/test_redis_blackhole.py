"""A Redis shard black-holed under a steady stream of enqueues, on hosts of
their own (network namespaces: a client host, a control-store host and two
shard hosts). Packets to the shard are dropped without a word, so a call
learns nothing until its timeout (``PINLATER_STORE_TIMEOUT_S``).

The ledger, at the end: every acknowledged enqueue is on a shard with its
body (0 lost); no job is there that no call attempted (0 extra); no body is
there twice. And no enqueue waits much longer than the store timeout: a
call that cannot reach the silent shard goes on to the other, one that was
sent to it fails as ``EnqueueOutcomeUnknown`` (its job may be stored), and
the shard is out of rotation until its probe writes again.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.hosts import FAULT_S, finish, python, redis_hosts, shard_of, store_env, through_fault
from tests.support.topology import Topology

STORE_TIMEOUT_S = 1.0
# A call may meet the timeout twice (connecting, then the command) before
# it goes on to the next shard.
LATENCY_BOUND_S = 2 * STORE_TIMEOUT_S + 0.5


@pytest.fixture
def topo() -> Iterator[Topology]:
    with Topology(["w1", "ctl", "r1", "r2"]) as topology:
        redis_hosts(topology, ["ctl", "r1", "r2"], "w1")
        yield topology


@pytest.mark.serial
def test_a_black_holed_shard_loses_no_enqueue_and_holds_none_up(topo: Topology, tmp_path: Path) -> None:
    env = store_env(topo, ["r1", "r2"], "ctl", PINLATER_STORE_TIMEOUT_S=str(STORE_TIMEOUT_S))
    finish(python(topo, "w1", env, "pinlater.cli", "migrate"), 60)
    ledger, window = through_fault(topo, env, lambda: topo.blackhole("r1"), tmp_path)
    report = ledger.summary(f"redis shard black-holed {FAULT_S:.0f} s")
    print(report)
    assert ledger.lost() == [] and ledger.extra() == [] and ledger.twice() == [], report
    # The stream went on through the fault, on the other shard, and no call
    # failed or waited much past the store timeout.
    during = ledger.between(window.cut, window.healed)
    assert len(during) > FAULT_S * 20 and all(shard_of(r["descriptor"]) == "r2" for r in during[-20:]), report
    # The call that was on its way when the silence began may have been
    # stored: it fails saying so (it is not sent to the other shard too,
    # which is how a job once came out twice). Every other call succeeds.
    failed = [r for r in ledger.calls if "error" in r]
    assert len(failed) <= 2 and all(r["error"].startswith("EnqueueOutcomeUnknown: ") for r in failed), report
    assert ledger.worst_latency_s() < LATENCY_BOUND_S, report
    # Back in rotation once it answers again.
    after = ledger.between(window.healed + 2, float("inf"))
    assert after and any(shard_of(r["descriptor"]) == "r1" for r in after), report
