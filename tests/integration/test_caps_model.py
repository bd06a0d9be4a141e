"""The cap against random schedules: several processes (each its own slots'
owner) dequeue, ACK their own and each other's jobs with and without
claims, fail them, move them back, let claims expire, are killed or close,
while the monitor and the processes' background steps run at random
points, with the times that decide a process gone shrunk to milliseconds.
After every action the shards' RUNNING count (exact: one thread acts) is
at most the cap; at the end everything drains and every slot comes back.
On every setup but the TLS ones (the contract suite runs those), whose
stores keep slots the same way."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.engine import slots
from pinlater.engine.slots import Slots
from pinlater.models import DequeuedJob
from pinlater.operators import Monitor

JOBS = 60
STEPS = 150


def _held(service: JobService, queue: str) -> int:
    return sum(held for held, _ in service.core.control.slots_owners(queue)[1].values())


class Processes:
    """Processes over one cluster's stores, each with its own slots."""

    def __init__(self, cluster: JobService, n: int) -> None:
        self.cluster = cluster
        self.all = [self.fresh(i) for i in range(n)]

    def fresh(self, i: int) -> JobService:
        core = self.cluster.core
        return JobService(replace(core.sibling(), slots=Slots(core.control, core.shards)), source=f"p{i}")

    def tend(self, queue: str) -> None:
        for p in self.all:
            for pool in list(p.core.slots._pools.values()):
                p.core.slots._tend_pool(queue, pool)

    def close(self) -> None:
        for p in self.all:
            p.core.slots.close()


@pytest.mark.parametrize("seed", range(2))
def test_random_schedules_never_run_more_than_the_cap_and_every_slot_comes_back(
    cluster: JobService, queue_name: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "OWNER_STALE_MS", 150)
    monkeypatch.setattr(slots, "CREDIT_TRUST_S", 0.04)
    monkeypatch.setattr(slots, "CHECK_S", 0.0)
    rng = random.Random(seed)
    cap = rng.randint(1, 4)
    cluster.create_queue(queue_name, max_running=cap, claim_timeout_ms=100)
    cluster.enqueue(queue_name, [Job(b"j%d" % i, attempts_allowed=50) for i in range(JOBS)])
    procs = Processes(cluster, 3)
    monitor = Monitor(cluster.operators, queues=[queue_name])
    held: dict[str, tuple[int, DequeuedJob]] = {}  # descriptor -> (process, job) as the test last saw it
    log: list[str] = []

    def act() -> None:
        action = rng.choice(["dequeue"] * 4 + ["ack", "ack", "foreign", "fail", "back", "expire", "kill", "close",
                                               "monitor", "tend"])
        i = rng.randrange(len(procs.all))
        p = procs.all[i]
        mine = [d for d, (owner, _) in held.items() if owner == i]
        log.append(f"{action} p{i}")
        if action == "dequeue":
            for j in p.dequeue(queue_name, rng.randint(1, 3)):
                held[j.descriptor] = (i, j)
        elif action in ("ack", "fail", "back") and mine:
            d = rng.choice(mine)
            j = held.pop(d)[1]
            claim = j.claim if rng.random() < 0.5 else None
            if action == "ack":
                p.ack(queue_name, succeeded=[Ack(d, claim=claim)])
            elif action == "fail":
                p.ack(queue_name, failed=[Ack(d, claim=claim, retry_delay_ms=1)])
            else:
                p.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True, claim=claim)])
        elif action == "foreign" and held:
            d = rng.choice(list(held))
            j = held.pop(d)[1]
            other = procs.all[rng.randrange(len(procs.all))]
            other.ack(queue_name, succeeded=[Ack(d, claim=j.claim if rng.random() < 0.5 else None)])
        elif action == "expire":
            time.sleep(0.12)
            monitor.run_once()
            infos = cluster.lookup(list(held))
            for d in list(held):
                if d not in infos or infos[d].state is not JobState.RUNNING:
                    del held[d]
        elif action in ("kill", "close"):
            if action == "close":
                p.core.slots.close()
            else:
                p.core.slots._stop.set()  # gone without a word: its pools die with it
            procs.all[i] = procs.fresh(i)
            for d in mine:
                del held[d]  # orphans now: their claims expire
        elif action == "monitor":
            monitor.run_once()
        elif action == "tend":
            procs.tend(queue_name)

    try:
        for _ in range(STEPS):
            act()
            running = cluster.count(queue_name, JobState.RUNNING)
            assert running <= cap, f"{running} RUNNING over a cap of {cap} after: {log[-8:]}"
        # Drain: everything runs to the end, under the cap, and every slot comes back.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and cluster.count(queue_name, JobState.SUCCEEDED) < JOBS:
            for p in procs.all:
                jobs = p.dequeue(queue_name, cap, succeeded=[])
                assert cluster.count(queue_name, JobState.RUNNING) <= cap
                if jobs:
                    p.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs])
            for d, (i, j) in list(held.items()):
                procs.all[i].ack(queue_name, succeeded=[Ack(d, claim=j.claim)])
                del held[d]
            time.sleep(0.02)
            monitor.run_once()
            procs.tend(queue_name)
        assert cluster.count(queue_name, JobState.SUCCEEDED) == JOBS, log[-20:]

        def all_back() -> bool:
            procs.tend(queue_name)
            monitor.run_once()
            return _held(cluster, queue_name) == 0

        deadline = time.monotonic() + 10
        while not all_back():
            assert time.monotonic() < deadline, f"{_held(cluster, queue_name)} slots still held after the drain"
            time.sleep(0.05)
    finally:
        procs.close()


def test_a_slot_another_process_frees_is_not_given_back_before_its_free_lands(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owner A's jobs ACKed by process B: B frees their slots in A's count
    at its next step, after A's lookup may have found them ended. Had A
    counted them spare from the store's count before B's free, and given
    them back, B's free would take them off again: A's running job out of
    every count, and one job over the cap. The steps run by hand, in that
    order (no background threads)."""
    monkeypatch.setattr(slots, "CHECK_S", 0.0)
    monkeypatch.setattr(slots, "IDLE_S", 0.0)
    monkeypatch.setattr(slots, "GONE_S", 0.3)
    cluster.create_queue(queue_name, max_running=3)
    cluster.enqueue(queue_name, [Job(b"j%d" % i) for i in range(10)])
    procs = Processes(cluster, 2)
    a, b = procs.all
    for p in procs.all:
        p.core.slots._stop.set()  # their background steps only when the test runs them
    try:
        jobs = a.dequeue(queue_name, 10)
        assert len(jobs) == 3
        b.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs[:2]])  # B's frees wait
        procs.tend(queue_name)  # A finds them ended (A tends before B)
        procs.tend(queue_name)  # A's spare slots idle: given back (before the fix: the two not yet freed)
        procs.tend(queue_name)  # B's frees land
        got = b.dequeue(queue_name, 10)
        running = cluster.count(queue_name, JobState.RUNNING)
        assert running <= 3, f"{running} RUNNING over a cap of 3"
        assert len(got) == 2
        # Once GONE_S has passed, nothing is held that no job uses, and nothing is lost.
        time.sleep(0.35)
        b.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in got])
        a.ack(queue_name, succeeded=[Ack(jobs[2].descriptor, claim=jobs[2].claim)])
        for _ in range(3):
            procs.tend(queue_name)
        assert _held(cluster, queue_name) == 0
        assert len(a.dequeue(queue_name, 10)) == 3
    finally:
        procs.close()
