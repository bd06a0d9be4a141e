"""Batches when a store refuses writes, on real servers: a Redis of this
module's own, out of memory (``maxmemory`` 1 under noeviction) or a replica
(``REPLICAOF`` a port where no master listens), is the control store that
keeps the batches, or the shard of a batch's callback; the other store is a
db of the shared test Redis. In process and through the Thrift server:

* A batch made while the control store refuses fails, and its callback,
  stored first and never due, is cancelled rather than left for ever.
* Jobs enqueued into a batch while the control store refuses: the call
  fails saying they were cancelled, none of them runs, and the same call
  sent again once the store takes writes joins them to the batch, whose
  callback then runs once, after all of them.
* A batch cancelled while its callback's shard is a replica: the jobs are
  cancelled, the callback is reported unapplied, and cancelling the batch
  again once the shard takes writes cancels the callback too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from pinlater import Ack, Job, JobState
from pinlater.client_api import PinLaterClient
from pinlater.errors import PinLaterError
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, free_port, redis_url
from tests.support.waits import wait_for

REFUSALS = ["oom", "readonly"]
VIA = ["in_process", "thrift"]


class Refusing:
    """The private Redis: takes writes until ``refuse()``, again after ``accept()``."""

    def __init__(self, port: int, kind: str) -> None:
        self.admin: redis.Redis[bytes] = redis.Redis(port=port, socket_timeout=5)
        self.kind = kind
        self.nobody = free_port()  # no master there: a replica of it refuses writes and keeps its data

    def refuse(self) -> None:
        if self.kind == "oom":
            self.admin.config_set("maxmemory-policy", "noeviction")
            self.admin.config_set("maxmemory", 1)
        else:
            self.admin.replicaof("127.0.0.1", self.nobody)

    def accept(self) -> None:
        self.admin.config_set("maxmemory", 0)
        self.admin.replicaof("NO", "ONE")


@pytest.fixture(params=REFUSALS)
def refusing(request: pytest.FixtureRequest, private_redis: PrivateRedis) -> Iterator[Refusing]:
    store = Refusing(private_redis.port, str(request.param))
    store.accept()  # whatever an earlier test left
    store.admin.flushall()
    yield store
    store.accept()


def settings(*, shard: str, control: str, probe_s: float = 3600.0) -> Settings:
    # No probing unless asked: a probe would take a refusing shard out before the call under test.
    return Settings(shards=parse_shards(f"r1={shard}"), control_url=control, health_probe_interval_s=probe_s,
                    socket_timeout_s=5.0)


def shared(db: int) -> str:
    return redis_url(REDIS_PORTS[0], db)


@contextmanager
def client_of(svc: JobService, via: str) -> Iterator[PinLaterClient]:
    if via == "in_process":
        yield svc
        return
    server = ThriftServer(svc, "127.0.0.1", 0, metrics_port=0).start()
    client = ThriftClient([f"127.0.0.1:{server.port}"], source="batch-refusals", timeout_s=10)
    try:
        yield client
    finally:
        client.close()
        server.stop(grace_s=5)


def drain(svc: JobService, queue: str) -> list[bytes]:
    """Runs every due job of ``queue`` to success; their bodies."""
    bodies: list[bytes] = []
    while jobs := svc.dequeue(queue, 100):
        svc.ack(queue, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs])
        bodies += [j.body for j in jobs]
    return bodies


@pytest.mark.parametrize("via", VIA)
def test_a_batch_refused_leaves_no_callback_waiting(
    refusing: Refusing, private_redis: PrivateRedis, via: str, queue_name: str
) -> None:
    control = redis_url(private_redis.port, REDIS_CONTROL_DB)
    with JobService.from_settings(settings(shard=shared(REDIS_SHARD_DB), control=control), source="t") as svc:
        svc.create_queue(queue_name)
        refusing.refuse()
        with client_of(svc, via) as client, pytest.raises(PinLaterError, match="refuses writes"):
            client.create_batch(queue_name, Job(b"callback"))
        refusing.accept()
        assert svc.count(queue_name, JobState.PENDING, future=True) == 0
        assert svc.count(queue_name, JobState.FAILED) == 1  # the callback, cancelled
        # Once the store takes writes, a batch is made as ever.
        batch = svc.create_batch(queue_name, Job(b"callback"))
        assert svc.seal_batch(batch).state == "released"
        assert drain(svc, queue_name) == [b"callback"]


@pytest.mark.parametrize("via", VIA)
def test_jobs_a_batch_refused_are_cancelled_and_the_call_can_be_sent_again(
    refusing: Refusing, private_redis: PrivateRedis, via: str, queue_name: str
) -> None:
    control = redis_url(private_redis.port, REDIS_CONTROL_DB)
    done = f"{queue_name}_done"
    with JobService.from_settings(settings(shard=shared(REDIS_SHARD_DB), control=control), source="t") as svc:
        svc.create_queue(queue_name)
        svc.create_queue(done)
        batch = svc.create_batch(done, Job(b"callback"))
        svc.enqueue(queue_name, [Job(b"j0")], batch=batch)

        def call(client: PinLaterClient) -> object:
            return client.enqueue(queue_name, [Job(b"j1"), Job(b"j2")], batch=batch)

        refusing.refuse()
        with client_of(svc, via) as client:
            with pytest.raises(PinLaterError, match="were cancelled: nothing of the call will run"):
                call(client)
            assert svc.count(queue_name, JobState.PENDING) == 1  # j0 alone
            refusing.accept()
            call(client)
        assert svc.batch_status(batch).total == 3
        assert sorted(drain(svc, queue_name)) == [b"j0", b"j1", b"j2"]
        svc.seal_batch(batch)
        status = svc.batch_status(batch)
        assert (status.state, status.succeeded, status.failed) == ("released", 3, 0)
        assert drain(svc, done) == [b"callback"]


# Out of memory a shard still cancels: a cancel's first write frees memory.
@pytest.mark.parametrize("refusing", ["readonly"], indirect=True)
@pytest.mark.parametrize("via", VIA)
def test_cancelling_a_batch_again_cancels_a_callback_its_shard_refused(
    refusing: Refusing, private_redis: PrivateRedis, via: str, queue_name: str
) -> None:
    shard = redis_url(private_redis.port, REDIS_SHARD_DB)
    # Probed: the refused cancel takes the shard out of rotation until a probe writes there.
    with JobService.from_settings(settings(shard=shard, control=shared(REDIS_CONTROL_DB), probe_s=0.2),
                                  source="t") as svc:
        svc.create_queue(queue_name)
        batch = svc.create_batch(queue_name, Job(b"callback"))
        stored = svc.enqueue(queue_name, [Job(b"j0"), Job(b"j1")], batch=batch)
        callback = svc.batch_status(batch).callback
        with client_of(svc, via) as client:
            refusing.refuse()
            first = client.cancel_batch(batch)
            assert set(first.unapplied) == {*stored, callback} and first.cancelled == []
            refusing.accept()
            wait_for(lambda: svc.operators.shard_status()["r1"].healthy, "the shard back in rotation")
            again = client.cancel_batch(batch)
        assert sorted(again.cancelled) == sorted([*stored, callback])
        found = svc.lookup([*stored, callback])
        assert {info.state for info in found.values()} == {JobState.FAILED}
        assert svc.count(queue_name, JobState.PENDING, future=True) == 0
        assert svc.batch_status(batch).state == "cancelled"
