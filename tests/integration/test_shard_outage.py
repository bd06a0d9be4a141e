"""One of two Redis shards stops mid-run: enqueues keep succeeding on the
other; when it returns its jobs drain; nothing is lost."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.errors import ShardConnectionFailed
from pinlater.monitor import Monitor
from pinlater.service import JobService
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, redis_cli, redis_url
from tests.support.stores import settings_for

# Stops a Redis server other tests use.
pytestmark = pytest.mark.serial


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
def test_stopping_one_redis_shard_loses_nothing(servers: None, queue_name: str) -> None:
    settings = settings_for("redis_sharded", health_probe_interval_s=0.2)
    client = JobService.from_settings(settings, source="outage-test")
    monitor = Monitor(client, queues=[queue_name])
    try:
        client.create_queue(queue_name, claim_timeout_ms=1000)
        enqueued: list[str] = []
        done: set[str] = set()
        for _ in range(20):
            enqueued += client.enqueue(queue_name, [Job(b"before")] * 10)
        assert {JobDescriptor.parse(d).shard for d in enqueued} == {"r1", "r2"}

        redis_cli("stop-redis", "16380")
        try:
            during: list[str] = []
            for i in range(100):  # every enqueue must succeed while r2 is down
                during += client.enqueue(queue_name, [Job(b"during-%d" % i)] * 5)
                _work(client, queue_name, done)
            assert {JobDescriptor.parse(d).shard for d in during} == {"r1"}
            assert client.shards.is_healthy("r1") and not client.shards.is_healthy("r2")
            enqueued += during
        finally:
            redis_cli("start-redis", "16380")

        deadline = time.time() + 30
        while not client.shards.is_healthy("r2"):
            assert time.time() < deadline, "shard r2 never came back into rotation"
            time.sleep(0.1)

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
def test_queues_keep_working_while_the_control_store_is_down(servers: None, queue_name: str) -> None:
    """Queue configs and rate buckets on a Redis of their own (16380), jobs on
    16379: stopping the control store must not stop the queues."""
    settings = settings_for(
        "redis", control_url=redis_url(REDIS_PORTS[1], REDIS_CONTROL_DB), config_ttl_s=0.2
    )
    with JobService.from_settings(settings, source="control-outage") as client:
        client.create_queue(queue_name, max_dequeue_rate=500)
        client.enqueue(queue_name, [Job(b"x")] * 50)
        assert len(client.dequeue(queue_name, 5)) == 5  # the config is now cached
        redis_cli("stop-redis", "16380")
        try:
            time.sleep(0.3)  # past the config TTL: the control store must be asked again
            more = client.enqueue(queue_name, [Job(b"during")] * 5)
            jobs = client.dequeue(queue_name, 20)
            assert jobs, "dequeues stopped with the control store"
            assert client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs]).acked
            assert set(more) <= set(client.lookup(more))
        finally:
            redis_cli("start-redis", "16380")
        assert client.queue_config(queue_name, fresh=True).max_dequeue_rate == 500
