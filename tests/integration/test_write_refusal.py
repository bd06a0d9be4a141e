"""A shard that answers but refuses writes, on real servers: a Redis of this
module's own out of memory (``maxmemory`` 1 under noeviction), a replica
(``REPLICAOF`` a port where no master listens) or short of replicas
(``min-replicas-to-write``), and a MariaDB of its own made read-only. The
other shard is a db of the shared test Redis.

* A dequeue over both hands over what it claimed on the healthy shard, in
  process and through the Thrift server: the jobs are RUNNING under the
  returned claims and can be ACKed, the rate tokens not used are given
  back, and the refusing shard is reported; an ACK there is unapplied.
* Enqueues go to the healthy shard, none failing.
* The health probe writes: a refusing shard goes out of rotation though it
  answers a PING, stays out while it refuses, comes back once it writes,
  and the dashboard says why it is out.

The memory-shard version of every error kind: tests/unit/test_priority_walk_errors.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest
import redis

from dashboards.server import Dashboard
from pinlater import Ack, Job, JobState
from pinlater.client_api import PinLaterClient
from pinlater.descriptor import JobDescriptor
from pinlater.engine.shards import REFUSES_WRITES
from pinlater.errors import AckNotApplied, StorageError
from pinlater.service import JobService
from pinlater.settings import Settings, hash_secret, parse_shards
from pinlater.stores.base import ShardBackend, ShardBusy, ShardWriteRefused
from pinlater.stores.mysql.errors import MySQLWriteRefused, storage_error
from pinlater.stores.redis.errors import redis_guard
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.dashboards.http import call
from tests.integration.private_mariadb import PrivateMariaDB
from tests.servers import (
    REDIS_CONTROL_DB,
    REDIS_PORTS,
    REDIS_SHARD_DB,
    PrivateRedis,
    free_port,
    redis_db,
    redis_url,
)
from tests.support.waits import wait_for

# The refusals that also refuse a claim: a Redis out of memory still runs a
# dequeue (its script's first write, a ZREM, frees memory).
CLAIM_REFUSALS = ["redis_readonly", "redis_noreplicas", "mysql_read_only"]
REFUSALS = ["redis_oom", *CLAIM_REFUSALS]
# The dashboard test's control store: the dashboard reads every queue it
# lists on every shard, and the shared one lists every queue of the session
# (on the MySQL shard, thousands of tables made to be counted).
DASHBOARD_CONTROL_DB = redis_db(15)  # only this module uses it; flushed first
RATE, BURST_S, BURST = 0.001, 10_000.0, 10  # a bucket of 10 tokens that refills by nothing meanwhile


@dataclass
class Refusal:
    """A store that takes writes until ``refuse()``, and again after ``accept()``."""

    url: str
    refuse: Callable[[], None]
    accept: Callable[[], None]


@pytest.fixture
def refusing(request: pytest.FixtureRequest, private_redis: PrivateRedis) -> Iterator[Refusal]:
    kind = str(request.param)
    if kind.startswith("redis"):
        admin: redis.Redis[bytes] = redis.Redis(port=private_redis.port, socket_timeout=5)
        url = redis_url(private_redis.port, REDIS_SHARD_DB)
        nobody = free_port()  # no master there: a replica of it refuses writes and keeps its data

        def refuse() -> None:
            if kind == "redis_oom":
                admin.config_set("maxmemory-policy", "noeviction")
                admin.config_set("maxmemory", 1)
            elif kind == "redis_readonly":
                admin.replicaof("127.0.0.1", nobody)
            else:
                admin.config_set("min-replicas-to-write", 1)

        def accept() -> None:
            admin.config_set("maxmemory", 0)
            admin.config_set("min-replicas-to-write", 0)
            admin.replicaof("NO", "ONE")
    else:
        mariadb: PrivateMariaDB = request.getfixturevalue("private_mariadb")
        url = mariadb.url(f"refusal_{uuid.uuid4().hex[:10]}")

        def refuse() -> None:
            mariadb.read_only(True)

        def accept() -> None:
            mariadb.read_only(False)

    accept()  # whatever an earlier test left
    if kind.startswith("redis"):
        redis.Redis.from_url(url).flushdb()
    yield Refusal(url, refuse, accept)
    accept()


def settings_with(refusal: Refusal, **overrides: Any) -> Settings:
    """r1 on the shared test Redis, r2 the refusing store; no probing
    unless asked (a probe would take r2 out before the call under test)."""
    fields: dict[str, Any] = {
        "shards": parse_shards(f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},r2={refusal.url}"),
        "control_url": redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        "health_probe_interval_s": 3600.0,
        "rate_burst_s": BURST_S,
        "socket_timeout_s": 5.0,
    }
    fields.update(overrides)
    return Settings(**fields)


class Order:
    """The order in which a service tries its shards (instead of a random one)."""

    def __init__(self, svc: JobService, monkeypatch: pytest.MonkeyPatch) -> None:
        self.first = "r1"
        shards = svc.core.shards
        monkeypatch.setattr(shards, "healthy_shuffled", self._ordered(shards.healthy))

    def _ordered(self, healthy: Callable[[], list[ShardBackend]]) -> Callable[[], list[ShardBackend]]:
        return lambda: sorted(healthy(), key=lambda b: b.shard_id != self.first)


def shard_of(descriptor: str) -> str:
    return JobDescriptor.parse(descriptor).shard



@pytest.mark.parametrize("refusing", CLAIM_REFUSALS, indirect=True)
@pytest.mark.parametrize("via", ["in_process", "thrift"])
def test_a_dequeue_hands_over_its_claims_when_another_shard_refuses_writes(
    refusing: Refusal, via: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with JobService.from_settings(settings_with(refusing), source="refusal-worker") as svc:
        order = Order(svc, monkeypatch)
        svc.create_queue(queue_name, priorities=1, max_dequeue_rate=RATE)
        order.first = "r2"
        on_r2 = svc.enqueue(queue_name, [Job(b"r2 job")] * 3)
        [held] = svc.dequeue(queue_name, 1)  # a claim on r2, to ACK while it refuses
        order.first = "r1"
        on_r1 = svc.enqueue(queue_name, [Job(b"r1 job %d" % i) for i in range(4)])
        assert {shard_of(d) for d in on_r2} == {shard_of(held.descriptor)} == {"r2"}
        assert {shard_of(d) for d in on_r1} == {"r1"}
        refusing.refuse()

        server = ThriftServer(svc, "127.0.0.1", 0, metrics_port=0).start() if via == "thrift" else None
        client: PinLaterClient = (
            ThriftClient([f"127.0.0.1:{server.port}"], source="refusal-worker", timeout_s=10) if server else svc
        )
        try:
            jobs = client.dequeue(queue_name, 8)  # r1's 4, then r2 refuses to claim
            assert sorted(j.descriptor for j in jobs) == sorted(on_r1)
            # Claimed for the caller, under the claims handed over (a lookup
            # shows whose claim, never its token).
            found = svc.lookup(on_r1)
            assert {i.state for i in found.values()} == {JobState.RUNNING}
            assert {i.claim for i in found.values()} == {"refusal-worker"}
            assert {j.claim[17:] for j in jobs} == {"refusal-worker"} and all(len(j.claim) > 17 for j in jobs)
            config = svc.queue_config(queue_name)
            assert svc.core.rate_limiter.take(config, 100) == BURST - 1 - 4  # 8 granted, 4 given back

            # r2 is reported: out of rotation and why, and in the store metrics.
            health = svc.operators.shard_status()["r2"]
            assert (health.healthy, health.out_reason) == (False, REFUSES_WRITES)
            assert health.last_error and "refuses writes" in health.last_error
            errors = svc.operators.store_metrics_snapshot()["r2"]["dequeue"]["errors"]
            assert sum(errors.values()) == 1 and next(iter(errors)).endswith("WriteRefused"), errors

            # r1's jobs are ACKed; the one held on r2 is reported unapplied.
            with pytest.raises(AckNotApplied) as raised:
                client.ack(queue_name, succeeded=[Ack(j.descriptor) for j in [*jobs, held]])
            assert sorted(raised.value.result.acked) == sorted(on_r1)
            assert list(raised.value.result.unapplied) == [held.descriptor]
            assert {i.state for i in svc.lookup(on_r1).values()} == {JobState.SUCCEEDED}
        finally:
            if server is not None:
                client.close()
                server.stop(grace_s=5)
        refusing.accept()
        assert svc.ack(queue_name, succeeded=[Ack(held.descriptor)]).acked == [held.descriptor]


@pytest.mark.parametrize("refusing", REFUSALS, indirect=True)
def test_enqueues_go_to_the_shard_that_takes_writes(
    refusing: Refusal, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with JobService.from_settings(settings_with(refusing), source="refusal-producer") as svc:
        order = Order(svc, monkeypatch)
        svc.create_queue(queue_name)
        refusing.refuse()
        order.first = "r2"  # every enqueue tries the refusing shard first
        stored = [d for i in range(10) for d in svc.enqueue(queue_name, [Job(b"job %d" % i)] * 3)]
        assert len(stored) == 30 and {shard_of(d) for d in stored} == {"r1"}
        assert {i.state for i in svc.lookup(stored).values()} == {JobState.PENDING}
        health = svc.operators.shard_status()["r2"]
        assert (health.healthy, health.out_reason) == (False, REFUSES_WRITES)
        assert sum(svc.operators.store_metrics_snapshot()["r2"]["enqueue"]["errors"].values()) == 1


@pytest.mark.parametrize("refusing", REFUSALS, indirect=True)
def test_the_probe_keeps_a_refusing_shard_out_until_it_writes_and_the_dashboard_says_why(
    refusing: Refusal, queue_name: str
) -> None:
    token = "refusal-dashboard-token"
    control = redis_url(REDIS_PORTS[0], DASHBOARD_CONTROL_DB)
    with redis.Redis.from_url(control) as r:
        r.flushdb()
    settings = settings_with(refusing, health_probe_interval_s=0.1, dashboard_token_sha256=hash_secret(token),
                             control_url=control)
    with JobService.from_settings(settings, source="refusal-probe") as svc:
        dashboard = Dashboard.from_settings(settings, port=0, refresh_s=0.2).start()
        try:
            svc.create_queue(queue_name)
            shards = svc.core.shards

            def r2_on_dashboard() -> dict[str, Any]:
                status, body = call(dashboard.url + "/api/shards")
                assert status == 200, body
                return next(s for s in body["shards"] if s["id"] == "r2")

            wait_for(lambda: shards.is_healthy("r2") and r2_on_dashboard()["healthy"], "r2 in rotation")
            refusing.refuse()
            # Out with no call of ours: the probe's write is refused.
            wait_for(lambda: not shards.is_healthy("r2"), "the probe to take r2 out")
            until = time.monotonic() + 1.0
            stored: list[str] = []
            while time.monotonic() < until:  # ten probes and more: r2 answers a ping, and stays out
                shards.get("r2").ping()
                health = shards.status()["r2"]
                assert (health.healthy, health.out_reason) == (False, REFUSES_WRITES)
                stored += svc.enqueue(queue_name, [Job(b"while out")])
                time.sleep(0.05)
            assert {shard_of(d) for d in stored} == {"r1"}
            with pytest.raises(ShardWriteRefused):
                shards.get("r2").probe()

            shown = wait_for(lambda: (s := r2_on_dashboard())["out_reason"] and s, "the dashboard to say why")
            assert shown["healthy"] is False and shown["out_reason"] == REFUSES_WRITES
            assert "refuses writes" in shown["last_error"] and shown["counted"] is False

            refusing.accept()
            wait_for(lambda: shards.is_healthy("r2"), "r2 back in rotation", timeout_s=5.0)
            assert shards.status()["r2"].out_reason is None
            back = wait_for(lambda: (s := r2_on_dashboard())["healthy"] and s, "the dashboard to show r2 back")
            assert back["out_reason"] is None
            landed = wait_for(lambda: shard_of(svc.enqueue(queue_name, [Job(b"after")])[0]) == "r2",
                              "an enqueue to land on r2 again")
            assert landed
        finally:
            dashboard.close()


# -- classifying the stores' errors (no server) --------------------------------------------

@pytest.mark.parametrize(("error", "refused"), [
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), True),
    (redis.exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently "
                                    "unable to persist to disk."), True),
    (redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas to write."), True),
    (redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
])
def test_redis_errors_that_refuse_writes(error: redis.exceptions.RedisError, refused: bool) -> None:
    with pytest.raises(StorageError) as raised, redis_guard("redis shard r9", ShardBusy):
        raise error
    assert isinstance(raised.value, ShardWriteRefused) is refused
    assert ("refuses writes" in str(raised.value)) is refused


@pytest.mark.parametrize(("code", "refused"), [(1290, True), (1836, True), (1036, True), (1114, True),
                                               (1021, True), (1213, False), (1062, False)])
def test_mysql_errors_that_refuse_writes(code: int, refused: bool) -> None:
    error = storage_error("127.0.0.1:3306/db", pymysql.err.OperationalError(code, "the server's text"))
    assert isinstance(error, ShardWriteRefused) is refused and isinstance(error, MySQLWriteRefused) is refused
    assert error.errno == code and str(error).startswith("127.0.0.1:3306/db")
