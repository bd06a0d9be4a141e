"""A queue's concurrency cap holds across processes and shards, and through
what ends claims without a call: a worker SIGKILLed, a shard stopped with
jobs running, the control store restarted. No slot is lost for good."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from pinlater import Ack, Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.engine import slots
from pinlater.engine.slots import SlotsUnavailable
from pinlater.errors import StorageError
from pinlater.kit.sqlblocks import job_table
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import parse_shards
from tests.integration.mysql_support import raw_connection
from tests.integration.procs import capped_worker, hold_jobs, ready
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, redis_url
from tests.support.caps import most_at_once
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.stores import settings_for
from tests.support.waits import wait_for

CAP = 5


def _held(client: JobService, queue: str) -> int:
    return sum(held for held, _ in client.core.control.slots_owners(queue)[1].values())

JOB_S = 0.5
RUN_S = 12.0


@pytest.mark.serial  # its throughput is timed: on a machine of its own
@pytest.mark.parametrize("setup", ["redis_sharded", "mysql_sharded"])
def test_eighteen_workers_in_three_processes_over_two_shards_never_run_more_than_the_cap(
    servers: None, setup: str, queue_name: str
) -> None:
    settings = settings_for(setup)
    with JobService.from_settings(settings, source="operator") as client:
        client.create_queue(queue_name, max_running=CAP)
        # Each batch lands on one shard at random: six could all land on one
        # (1 run in 32), so more come until both have some.
        enqueued: list[str] = []
        for _ in range(30):
            enqueued += client.enqueue(queue_name, [Job(b"x")] * 100)
            if len(enqueued) >= 600 and len({JobDescriptor.parse(d).shard for d in enqueued}) == 2:
                break
        assert {JobDescriptor.parse(d).shard for d in enqueued} == set(client.operators.shard_ids())
        samples: list[tuple[float, float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            # The store's own count of RUNNING jobs, read shard after shard.
            while not stop.is_set():
                before = time.monotonic()
                n = client.count(queue_name, JobState.RUNNING)
                samples.append((before, time.monotonic(), n))
                stop.wait(0.03)

        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(3, mp_context=context) as pool:
            for warming in [pool.submit(ready) for _ in range(3)]:
                warming.result(timeout=120)
            start = manager.Barrier(4)
            futures = [pool.submit(capped_worker, settings, queue_name, 6, JOB_S, RUN_S, str(i), start)
                       for i in range(3)]
            sampler = threading.Thread(target=sample)
            start.wait(timeout=120)
            t0 = time.monotonic()
            sampler.start()
            jobs = [j for f in futures for j in f.result(timeout=120)]
            stop.set()
            sampler.join()

    # The workers' own clocks: never more than the cap between a job's
    # start and its end.
    assert most_at_once([(s, e) for s, e, _ in jobs]) <= CAP
    # The stores' counts: a count read across two shards may see a job
    # end on one and another start on the other within it, never more.
    for before, after, n in samples:
        ending = sum(1 for _, e, acked in jobs if e <= after and acked >= before)
        assert n <= CAP + ending, f"{n} RUNNING at {before - t0:.2f} s, {ending} ACKs in flight"
    assert max(n for _, _, n in samples) >= CAP - 1
    # Throughput: the cap's worth of jobs at a time, within 10 %.
    started = [s for s, _, _ in jobs if t0 + 1 <= s < t0 + RUN_S - 1]
    rate = len(started) / (RUN_S - 2)
    ran = sum(e - s for s, e, _ in jobs) / len(jobs)
    acking = sum(a - e for _, e, a in jobs) / len(jobs)
    print(f"{setup}: {rate:.1f} jobs/s for a cap of {CAP} jobs of {JOB_S} s, {len(samples)} samples; "
          f"a job ran {ran * 1000:.1f} ms and its ACK with the next dequeue took {acking * 1000:.1f} ms")
    assert rate >= 0.9 * CAP / JOB_S, f"{rate:.1f} jobs/s, where the cap allows {CAP / JOB_S:g}"


@pytest.mark.slow
def test_a_sigkilled_workers_slots_free_when_its_claims_expire(
    servers: None, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process's monitor takes a process gone after 2 s, not 20 (and
    # this process trusts its own spare slots for less than that).
    monkeypatch.setattr(slots, "OWNER_STALE_MS", 2000)
    monkeypatch.setattr(slots, "CREDIT_TRUST_S", 0.5)
    settings = settings_for("redis_sharded")
    with JobService.from_settings(settings, source="survivor") as client:
        client.create_queue(queue_name, max_running=3, claim_timeout_ms=1500)
        client.enqueue(queue_name, [Job(b"x", attempts_allowed=3)] * 6)
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager:
            held = manager.Event()
            doomed = context.Process(target=hold_jobs, args=(settings, queue_name, 3, held))
            doomed.start()
            try:
                assert held.wait(120), "the doomed worker never got its jobs"
                assert client.dequeue(queue_name, 3) == []
                os.kill(doomed.pid or 0, signal.SIGKILL)
            finally:
                doomed.join(30)
        monitor = Monitor(client.operators, queues=[queue_name])
        killed_at = time.monotonic()

        def freed() -> list[object]:
            monitor.run_once()
            return client.dequeue(queue_name, 3)  # type: ignore[return-value]

        # Its process is gone: the monitor settles its slots once it has
        # not synced for OWNER_STALE_MS and its claims have expired.
        got = wait_for(freed, "the killed worker's slots", 20, 0.2)
        assert time.monotonic() - killed_at >= 1.0  # not before the claims expired
        assert len(got) == 3
        assert client.dequeue(queue_name, 3) == []


@pytest.mark.slow
def test_a_shard_stopped_with_jobs_running_keeps_their_slots_until_it_returns(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    """What a stopped shard's slots do: they stay held (those jobs may be
    running still), and the cap counts them; when the shard returns, the
    late ACKs and the monitor's pass free them, and nothing is stuck."""
    private_redis.start()
    shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},r2={redis_url(private_redis.port, REDIS_SHARD_DB)}"
    settings = settings_for("redis", shards=parse_shards(shards), health_probe_interval_s=0.2)
    with JobService.from_settings(settings, source="outage") as client:
        monitor = Monitor(client.operators, queues=[queue_name])
        client.create_queue(queue_name, max_running=4, claim_timeout_ms=2000)
        for _ in range(10):
            client.enqueue(queue_name, [Job(b"x", attempts_allowed=5)] * 4)
        running: list[str] = []
        while not any(JobDescriptor.parse(d).shard == "r2" for d in running) or len(running) < 4:
            jobs = client.dequeue(queue_name, 1)
            if jobs and (len(running) < 3 or JobDescriptor.parse(jobs[0].descriptor).shard == "r2"):
                running.append(jobs[0].descriptor)
            elif jobs:
                client.ack(queue_name, succeeded=[Ack(jobs[0].descriptor)])
        on_r2 = [d for d in running if JobDescriptor.parse(d).shard == "r2"]
        on_r1 = [d for d in running if d not in on_r2]
        private_redis.stop()
        try:
            wait_for(lambda: not client.core.shards.is_healthy("r2"), "r2 out of rotation", 10, 0.1)
            client.ack(queue_name, succeeded=[Ack(d) for d in on_r1])
            time.sleep(2.2)  # past the claim timeout: r2's claims would have expired
            monitor.run_once()
            # r1's slots went back to the store; r2's stay held.
            wait_for(lambda: _held(client, queue_name) == len(on_r2), "only r2's slots held", 5, 0.1)
            got = client.dequeue(queue_name, 10)
            assert len(got) == 4 - len(on_r2)
            assert all(JobDescriptor.parse(j.descriptor).shard == "r1" for j in got)
            client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in got])
        finally:
            private_redis.start()
        wait_for(lambda: client.core.shards.is_healthy("r2"), "r2 back in rotation", 30, 0.1)
        # Back: r2's claims expire in the monitor's pass, and their owner
        # finds them ended.
        monitor.run_once()
        wait_for(lambda: _held(client, queue_name) == 0, "r2's slots freed", 10, 0.1)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (client.count(queue_name, JobState.PENDING)
                                               or client.count(queue_name, JobState.RUNNING)):
            jobs = client.dequeue(queue_name, 4)
            assert len(jobs) <= 4
            client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs])
            if not jobs:
                time.sleep(0.05)
        assert client.count(queue_name, JobState.PENDING) == 0
        assert client.count(queue_name, JobState.RUNNING) == 0
        assert client.count(queue_name, JobState.SUCCEEDED) == 40


@pytest.mark.slow
def test_the_cap_holds_while_the_control_store_is_down_and_after_it_restarts(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    private_redis.start()
    settings = settings_for("redis", control_url=redis_url(private_redis.port, REDIS_CONTROL_DB), config_ttl_s=30)
    with JobService.from_settings(settings, source="control-restart") as client:
        monitor = Monitor(client.operators, queues=[queue_name])
        client.create_queue(queue_name, max_running=3)
        client.enqueue(queue_name, [Job(b"x")] * 12)
        first = client.dequeue(queue_name, 5)
        assert len(first) == 3
        private_redis.stop()
        try:
            # A cap fails closed: nothing is handed out uncounted...
            with pytest.raises(SlotsUnavailable, match="concurrency cap"):
                client.dequeue(queue_name, 5)
            # ...and ACKs still end their claims (their slots are freed later).
            assert len(client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in first[:2]]).acked) == 2
        finally:
            private_redis.start()
        # The slots survived the restart: the 2 its ACKs made spare are
        # this process's to use again (or given back, if it waited).
        assert _held(client, queue_name) in (1, 3)
        assert len(client.dequeue(queue_name, 5)) == 2
        assert client.dequeue(queue_name, 5) == []
        monitor.run_once()
        assert client.count(queue_name, JobState.RUNNING) == 3
        assert _held(client, queue_name) == 3


def test_a_mysql_dequeue_whose_reads_fail_after_its_commit_leaves_no_claim_and_no_slot(
    servers: None, queue_name: str
) -> None:
    """The dequeue commits its claims, then reads the jobs back; when that
    read fails (here: a column renamed by hand), the claims go back to
    PENDING, so the cap's slots the caller keeps as spare are free indeed."""
    with JobService.from_settings(settings_for("mysql"), source="undo") as client:
        client.create_queue(queue_name, max_running=2)
        client.enqueue(queue_name, [Job(b"x")] * 6)
        table = job_table(queue_name, 1)
        conn = raw_connection(MYSQL_DATABASES["d1"])
        try:
            with conn.cursor() as cur:
                cur.execute(f"ALTER TABLE {table} CHANGE body body_by_hand MEDIUMBLOB")
            for _ in range(3):
                with pytest.raises(StorageError, match="Unknown column"):
                    client.dequeue(queue_name, 2)
                # Not left RUNNING: the caller keeps those slots as spare, and
                # the next dequeue would claim beyond the cap (6 RUNNING under 2).
                assert client.count(queue_name, JobState.RUNNING) == 0
            with conn.cursor() as cur:
                cur.execute(f"ALTER TABLE {table} CHANGE body_by_hand body MEDIUMBLOB")
        finally:
            conn.close()
        got = client.dequeue(queue_name, 6)
        assert len(got) == 2 and client.count(queue_name, JobState.RUNNING) == 2
