"""One of two Redis shards stops mid-run: enqueues keep succeeding on the
other; when it returns its jobs drain; nothing is lost. The Redis that
stops (a shard, then the control store) is this module's own, so tests of
other processes keep their servers."""

from __future__ import annotations

import itertools
import logging
import time

import pytest
import redis

from pinlater import Ack, Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.errors import DequeueRateLimited, ShardConnectionFailed
from pinlater.models import DequeuedJob
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import parse_shards
from pinlater.stores.base import ShardWriteRefused
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, redis_url
from tests.support.stores import settings_for
from tests.support.waits import wait_for


def _work(client: JobService, queue: str, done: set[str]) -> None:
    try:
        jobs = client.dequeue(queue, 20)
    except ShardConnectionFailed:
        return
    try:
        client.ack(queue, succeeded=[Ack(j.descriptor) for j in jobs])
        done.update(j.descriptor for j in jobs)
    except ShardConnectionFailed:
        # ACKs to the dead shard: those jobs time out and run again.
        pass


@pytest.mark.slow
def test_stopping_one_redis_shard_loses_nothing(private_redis: PrivateRedis, queue_name: str) -> None:
    shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},r2={redis_url(private_redis.port, REDIS_SHARD_DB)}"
    settings = settings_for("redis", shards=parse_shards(shards), health_probe_interval_s=0.2)
    client = JobService.from_settings(settings, source="outage-test")
    monitor = Monitor(client.operators, queues=[queue_name])
    try:
        client.create_queue(queue_name, claim_timeout_ms=1000)
        enqueued: list[str] = []
        done: set[str] = set()
        for _ in range(20):
            enqueued += client.enqueue(queue_name, [Job(b"before")] * 10)
        assert {JobDescriptor.parse(d).shard for d in enqueued} == {"r1", "r2"}

        private_redis.stop()
        try:
            during: list[str] = []
            for i in range(100):  # every enqueue must succeed while r2 is down
                during += client.enqueue(queue_name, [Job(b"during-%d" % i)] * 5)
                _work(client, queue_name, done)
            assert {JobDescriptor.parse(d).shard for d in during} == {"r1"}
            assert client.core.shards.is_healthy("r1") and not client.core.shards.is_healthy("r2")
            enqueued += during
        finally:
            private_redis.start()

        wait_for(lambda: client.core.shards.is_healthy("r2"), "shard r2 back in rotation", 30, 0.1)

        deadline = time.time() + 60
        while len(done) < len(enqueued) and time.time() < deadline:
            _work(client, queue_name, done)
            monitor.run_once()  # returns jobs whose ACK was lost with the shard
            if not client.count(queue_name, "pending"):
                time.sleep(0.2)
        states = {d: info.state for d, info in client.lookup(enqueued).items()}
        assert len(states) == len(enqueued), "jobs missing after the outage"
        assert all(s is JobState.SUCCEEDED for s in states.values()), {
            s.name: list(states.values()).count(s) for s in set(states.values())
        }
    finally:
        client.close()


@pytest.mark.slow
def test_queues_keep_working_while_the_control_store_is_down(private_redis: PrivateRedis, queue_name: str) -> None:
    """Queue configs and rate buckets on a Redis of their own, jobs on
    16379: stopping the control store must not stop the queues."""
    private_redis.start()  # up, whatever the last test left
    settings = settings_for(
        "redis", control_url=redis_url(private_redis.port, REDIS_CONTROL_DB), config_ttl_s=0.2
    )
    with JobService.from_settings(settings, source="control-outage") as client:
        client.create_queue(queue_name, max_dequeue_rate=500)
        client.enqueue(queue_name, [Job(b"x")] * 50)
        assert len(client.dequeue(queue_name, 5)) == 5  # the config is now cached
        private_redis.stop()
        try:
            time.sleep(0.3)  # past the config TTL: the control store must be asked again
            more = client.enqueue(queue_name, [Job(b"during")] * 5)
            jobs = client.dequeue(queue_name, 20)
            assert jobs, "dequeues stopped with the control store"
            assert client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs]).acked
            assert set(more) <= set(client.lookup(more))
        finally:
            private_redis.start()
        assert client.queue_config(queue_name, fresh=True).max_dequeue_rate == 500


TIMEOUT_S = 1.0  # the control store's socket timeout in the test below


@pytest.mark.slow
def test_a_silent_control_store_costs_the_queues_one_timeout_not_one_per_call(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    """A control store that answers nothing (CLIENT PAUSE holds every
    command, as a host cut off by the network would): the first call that
    asks waits out the store timeout, the next ones use the cached config
    and the local rate bucket at once; once it answers, it is used again."""
    private_redis.start()
    control_url = redis_url(private_redis.port, REDIS_CONTROL_DB)
    settings = settings_for("redis", control_url=control_url, config_ttl_s=0.2, socket_timeout_s=TIMEOUT_S)
    admin = redis.Redis.from_url(redis_url(private_redis.port, REDIS_CONTROL_DB))
    with JobService.from_settings(settings, source="control-silent") as client:
        client.create_queue(queue_name, max_dequeue_rate=1000)
        client.enqueue(queue_name, [Job(b"x")] * 100)
        assert len(client.dequeue(queue_name, 5)) == 5  # the config is now cached
        admin.execute_command("CLIENT", "PAUSE", 6000, "ALL")
        try:
            time.sleep(0.3)  # past the config TTL: the control store would be asked again
            calls: list[tuple[float, float]] = []
            for _ in range(15):
                for call in (lambda: client.enqueue(queue_name, [Job(b"during")]),
                             lambda: client.dequeue(queue_name, 2)):  # rate-limited: a token per job
                    started = time.monotonic()
                    assert call() is not None
                    calls.append((started, time.monotonic()))
                time.sleep(0.05)
            # The first call waits out the timeout; then one call tries again
            # after a pause of 0.5 s, doubling up to 5 s while it fails, never
            # one per call. How many retries fit depends on how long the loop
            # ran (a loaded machine's calls are slower), their spacing does
            # not. A call may go on after its own timeout, so the bound is
            # from its start: a timeout, the pause, the next one's timeout.
            waited = [(s, e) for s, e in calls if e - s >= 0.9 * TIMEOUT_S]
            said = f"{len(waited)} of 30 calls waited out the store timeout: {[round(e - s, 2) for s, e in waited]}"
            assert waited and waited[0] == calls[0], said
            for k, ((started, _), (_, ended)) in enumerate(itertools.pairwise(waited)):
                least = 0.95 * (2 * TIMEOUT_S + min(0.5 * 2**k, 5.0))
                gap = ended - started
                assert gap >= least, f"retry {k + 1} ended {gap:.2f} s after the last began; {said}"
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        # Answering again: a change made elsewhere is seen within the TTL and a pause.
        with JobService.from_settings(settings, source="control-silent-admin") as other:
            other.set_rate(queue_name, 250)
        wait_for(lambda: client.queue_config(queue_name).max_dequeue_rate == 250, timeout_s=10,
                 what="the control store used again")
    admin.close()


@pytest.mark.slow
def test_a_queue_is_created_while_a_shard_is_silent_and_gets_storage_there_when_it_answers(
    private_redis: PrivateRedis, queue_name: str
) -> None:
    """A shard that answers nothing (CLIENT PAUSE, as a host cut off would)
    costs a queue's creation one store timeout, not the creation: the
    queue is made on the others, the silent one leaves the rotation, and
    its probe's recovery gives it the queue's storage."""
    private_redis.start()
    shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},r2={redis_url(private_redis.port, REDIS_SHARD_DB)}"
    settings = settings_for("redis", shards=parse_shards(shards), health_probe_interval_s=0.2, socket_timeout_s=1.0)
    admin = redis.Redis.from_url(redis_url(private_redis.port, REDIS_SHARD_DB))
    try:
        with JobService.from_settings(settings, source="create-silent") as client:
            client.create_queue(f"{queue_name}_before")  # both shards answered once
            admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
            started = time.monotonic()
            config = client.create_queue(queue_name, priorities=2)
            took = time.monotonic() - started
            assert config.priorities == 2 and took < 2.5, f"creating the queue took {took:.1f} s"
            assert not client.core.shards.is_healthy("r2")
            assert {JobDescriptor.parse(d).shard for d in client.enqueue(queue_name, [Job(b"x")] * 5)} == {"r1"}
            wait_for(lambda: client.core.shards.is_healthy("r2"), timeout_s=15, what="r2 back in rotation")
            wait_for(lambda: client.core.shards.get("r2").stored_queues().get(queue_name) == 2, timeout_s=10,
                     what="the queue's storage on r2")
            assert queue_name not in client.operators.unregistered_queues()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()


@pytest.mark.slow
def test_a_control_store_that_refuses_writes_leaves_rate_limited_queues_working(
    private_redis: PrivateRedis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A control store that answers but takes no write (its disk full:
    MISCONF; here NOREPLICAS, the same refusal): rate-limited dequeues go
    on with each process's own bucket, as with a control store that is
    down, instead of failing; what must write there (a config change)
    says why it fails; once it writes again its buckets are used again."""
    private_redis.start()
    settings = settings_for("redis", control_url=redis_url(private_redis.port, REDIS_CONTROL_DB), config_ttl_s=0.2)
    admin = redis.Redis.from_url(redis_url(private_redis.port, REDIS_CONTROL_DB))
    with JobService.from_settings(settings, source="control-refusing") as client:
        client.create_queue(queue_name, max_dequeue_rate=1000)
        client.enqueue(queue_name, [Job(b"x")] * 50)
        admin.config_set("min-replicas-to-write", 1)
        try:
            with caplog.at_level(logging.WARNING):
                got = [job for _ in range(5) for job in client.dequeue(queue_name, 4)]
                assert len(got) == 20
                client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in got])
            said = [r.getMessage() for r in caplog.records if "control store failing" in r.getMessage()]
            assert len(said) == 1 and "NOREPLICAS" in said[0], said
            with pytest.raises(ShardWriteRefused, match="refuses writes"):
                client.set_rate(queue_name, 5)
        finally:
            admin.config_set("min-replicas-to-write", 0)
        client.set_rate(queue_name, 5)
        wait_for(lambda: client.queue_config(queue_name).max_dequeue_rate == 5, timeout_s=10, what="the new rate")
        time.sleep(2.5)  # past the pause after a failure: the shared bucket is asked again
        taken = [job for _ in range(20) for job in _dequeue_or_none(client, queue_name)]
        assert 1 <= len(taken) <= 10, f"{len(taken)} jobs at 5 jobs/s, a burst of at most a few"
    admin.close()


def _dequeue_or_none(client: JobService, queue: str) -> list[DequeuedJob]:
    try:
        return client.dequeue(queue, 4)
    except DequeueRateLimited:
        return []
