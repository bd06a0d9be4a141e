"""A queue's per-key cap holds across processes and through what ends
claims without a call: a worker SIGKILLed, a shard stopped with jobs
running, the control store restarted. No slot is lost for good."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import Counter

import pytest

from pinlater import Ack, Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.engine import key_slots
from pinlater.engine.slots import SlotsUnavailable
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import parse_shards
from tests.integration.procs import hold_jobs
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, redis_url
from tests.support.caps import held_per_key
from tests.support.stores import settings_for
from tests.support.waits import wait_for


@pytest.mark.parametrize("setup", ["redis_sharded", "mysql_sharded"])
def test_a_sigkilled_workers_key_slots_free_when_its_claims_expire(
    servers: None, setup: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process's monitor takes a process gone after 2 s, not 20.
    monkeypatch.setattr(key_slots, "OWNER_STALE_MS", 2000)
    settings = settings_for(setup)
    with JobService.from_settings(settings, source="survivor") as client:
        client.create_queue(queue_name, claim_timeout_ms=1500)
        client.set_key_concurrency(queue_name, 2)
        client.enqueue(queue_name, [Job(b"a", key="A", attempts_allowed=3)] * 5)
        client.enqueue(queue_name, [Job(b"b", key="B")] * 2)
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            held = manager.Event()
            doomed = context.Process(target=hold_jobs, args=(settings, queue_name, 4, held))
            doomed.start()
            try:
                assert held.wait(120), "the doomed worker never got its jobs"
                assert client.dequeue(queue_name, 5) == []  # A and B both at their cap
                os.kill(doomed.pid or 0, signal.SIGKILL)
            finally:
                doomed.join(30)
        assert held_per_key(client, queue_name) == Counter({"A": 2, "B": 2})
        monitor = Monitor(client.operators, queues=[queue_name])
        killed_at = time.monotonic()

        def freed() -> list[object]:
            monitor.run_once()
            return client.dequeue(queue_name, 5)  # type: ignore[return-value]

        # Its claims expire (A's jobs go back to PENDING, B's too), and
        # the monitor settles the gone process's slots to what it runs: none.
        got = wait_for(freed, "the killed worker's key slots", 30, 0.2)
        assert time.monotonic() - killed_at >= 1.0  # not before the claims expired
        got += client.dequeue(queue_name, 5)
        assert Counter(j.body for j in got) == Counter({b"a": 2, b"b": 2})
        assert client.dequeue(queue_name, 5) == []
        assert held_per_key(client, queue_name) == Counter({"A": 2, "B": 2})


@pytest.mark.slow
def test_the_key_cap_holds_while_the_control_store_is_down_and_after_it_restarts(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    private_redis.start()
    settings = settings_for("redis", control_url=redis_url(private_redis.port, REDIS_CONTROL_DB), config_ttl_s=30)
    with JobService.from_settings(settings, source="control-restart") as client:
        monitor = Monitor(client.operators, queues=[queue_name])
        client.create_queue(queue_name)
        client.set_key_concurrency(queue_name, 2)
        client.enqueue(queue_name, [Job(b"a", key="A")] * 6)
        first = client.dequeue(queue_name, 5)
        assert len(first) == 2
        private_redis.stop()
        try:
            # A per-key cap fails closed: nothing is handed out uncounted...
            with pytest.raises(SlotsUnavailable, match="per-key cap"):
                client.dequeue(queue_name, 5)
            # ...and ACKs still end their claims (their slots are freed later).
            assert len(client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in first]).acked) == 2
        finally:
            private_redis.start()
        # The slots survived the restart, and the frees the ACKs left reach it.
        wait_for(lambda: held_per_key(client, queue_name) == Counter(), "the ACKs' frees", 10, 0.05)
        second = client.dequeue(queue_name, 5)
        assert len(second) == 2
        assert client.dequeue(queue_name, 5) == []
        monitor.run_once()
        assert client.count(queue_name, JobState.RUNNING) == 2
        assert held_per_key(client, queue_name) == Counter({"A": 2})


@pytest.mark.slow
def test_a_shard_stopped_with_jobs_running_keeps_their_key_slots_until_it_returns(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    """A stopped shard's jobs keep their key's slots (they may be running
    still) and the monitor settles nobody meanwhile; when the shard returns
    their claims expire, their owner finds them ended, and nothing is stuck."""
    private_redis.start()
    shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},r2={redis_url(private_redis.port, REDIS_SHARD_DB)}"
    settings = settings_for("redis", shards=parse_shards(shards), health_probe_interval_s=0.2)
    with JobService.from_settings(settings, source="outage") as client:
        monitor = Monitor(client.operators, queues=[queue_name])
        client.create_queue(queue_name, claim_timeout_ms=2000)
        client.set_key_concurrency(queue_name, 3)
        for _ in range(10):
            client.enqueue(queue_name, [Job(b"a", key="A", attempts_allowed=5)] * 4)
        # Three of A's jobs running, at least one of them on r2.
        running: list[str] = []
        while len(running) < 3 or not any(JobDescriptor.parse(d).shard == "r2" for d in running):
            jobs = client.dequeue(queue_name, 1)
            for j in jobs:
                if len(running) < 2 or JobDescriptor.parse(j.descriptor).shard == "r2":
                    running.append(j.descriptor)
                else:
                    client.ack(queue_name, succeeded=[Ack(j.descriptor)])
        on_r2 = [d for d in running if JobDescriptor.parse(d).shard == "r2"]
        on_r1 = [d for d in running if d not in on_r2]
        private_redis.stop()
        try:
            wait_for(lambda: not client.core.shards.is_healthy("r2"), "r2 out of rotation", 10, 0.1)
            client.ack(queue_name, succeeded=[Ack(d) for d in on_r1])
            time.sleep(2.2)  # past the claim timeout: r2's claims would have expired
            monitor.run_once()
            wait_for(lambda: held_per_key(client, queue_name) == Counter({"A": len(on_r2)}),
                     "only r2's slots held", 5, 0.1)
            got = client.dequeue(queue_name, 10)
            assert len(got) == 3 - len(on_r2)
            client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in got])
        finally:
            private_redis.start()
        wait_for(lambda: client.core.shards.is_healthy("r2"), "r2 back in rotation", 30, 0.1)
        monitor.run_once()  # r2's claims expire; their owner finds them ended
        wait_for(lambda: held_per_key(client, queue_name) == Counter(), "r2's key slots freed", 10, 0.1)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (client.count(queue_name, JobState.PENDING)
                                               or client.count(queue_name, JobState.RUNNING)):
            jobs = client.dequeue(queue_name, 4)
            assert len(jobs) <= 3
            client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs])
            if not jobs:
                time.sleep(0.05)
        assert client.count(queue_name, JobState.SUCCEEDED) == 40
