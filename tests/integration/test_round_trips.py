"""Round trips per operation on two-shard Redis and MySQL: what a poll of an
empty queue, a dequeue and each kind of ACK cost on the wire, counted on
the client (every Redis command of a shard's client; every MySQL command
packet on a shard database's connection, a multi-statement text being one).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
import redis

from pinlater import Ack, Job, JobService
from pinlater.retry import RetryPolicy
from pinlater.stores.redis.scripts import JOB_SCRIPTS, job_script_source
from pinlater.stores.redis.shard import RedisBackend
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.stores import settings_for

# Counts each shard's calls: beside other tests' load a call took an extra
# trip (3 where 2 are made alone), so it runs alone.
pytestmark = pytest.mark.serial

SHARDED = ["redis_sharded", "mysql_sharded"]


class RoundTrips:
    """Commands sent to each shard since the last ``take()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, shard: str) -> None:
        with self._lock:
            self._counts[shard] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self._counts = dict(self._counts), Counter()
        return counts


@pytest.fixture(params=SHARDED)
def counted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[JobService, RoundTrips]]:
    request.getfixturevalue("servers")
    # No health probes while counting: only the operations' own commands.
    service = JobService.from_settings(settings_for(request.param, health_probe_interval_s=3600), source="rt")
    trips = RoundTrips()
    if request.param == "redis_sharded":
        _count_redis(service, trips, monkeypatch)
    else:
        _count_mysql(trips, monkeypatch)
    yield service, trips
    service.close()


def _count_redis(service: JobService, trips: RoundTrips, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every packet sent on a shard's connections: one per command, one per
    pipeline."""
    shard_of: dict[tuple[int, int], str] = {}
    for backend in service.core.shards.all():
        assert isinstance(backend, RedisBackend)
        client = backend._r
        kwargs = client.connection_pool.connection_kwargs
        shard_of[(int(kwargs["port"]), int(kwargs["db"]))] = backend.shard_id
        for name in JOB_SCRIPTS:  # no NOSCRIPT reloads while counting
            client.execute_command("SCRIPT", "LOAD", job_script_source(name))
    original: Callable[..., Any] = redis.connection.AbstractConnection.send_packed_command

    def send_packed_command(conn: Any, command: Any, check_health: bool = True) -> Any:
        shard = shard_of.get((int(conn.port), int(conn.db)))
        if shard is not None:
            trips.add(shard)
        return original(conn, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", send_packed_command)


def _count_mysql(trips: RoundTrips, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command packet on a shard database's connections (a
    multi-statement text is one)."""
    shard_of = {MYSQL_DATABASES[s].encode(): s for s in ("d1", "d2")}
    original: Callable[..., Any] = vars(pymysql.connections.Connection)["_execute_command"]

    def execute_command(conn: Any, command: int, sql: Any) -> Any:
        shard = shard_of.get(conn.db or b"")
        if shard is not None:
            trips.add(shard)
        return original(conn, command, sql)

    monkeypatch.setattr("pymysql.connections.Connection._execute_command", execute_command)


def _ready(service: JobService, queue: str) -> None:
    """Queue created, its config cached and every shard connected, scripts
    loaded: set-up is not what is counted."""
    service.create_queue(queue, priorities=3, retry=RetryPolicy.constant(0, retries=3))
    for backend in service.core.shards.all():
        backend.now_ms()
    service.dequeue(queue, 1)


def test_an_empty_poll_is_one_call_per_shard(counted: tuple[JobService, RoundTrips], queue_name: str) -> None:
    service, trips = counted
    _ready(service, queue_name)
    trips.take()
    assert service.dequeue(queue_name, 10) == []
    assert trips.take() == {shard: 1 for shard in service.core.shards.ids}


def test_dequeue_and_acks_are_one_call_per_shard(counted: tuple[JobService, RoundTrips], queue_name: str) -> None:
    service, trips = counted
    _ready(service, queue_name)
    jobs: list[str] = []
    while len({d.split(":")[1] for d in jobs}) < 2:  # jobs on both shards
        jobs += service.enqueue(queue_name, [Job(b"x", priority=2)] * 3)
    trips.take()
    claimed = service.dequeue(queue_name, len(jobs))
    assert len(claimed) == len(jobs)
    # The first shard is asked for priority 1 and looks ahead; the second for
    # every priority (nothing better can be waiting on the first); then the
    # first for priority 2.
    assert sorted(trips.take().values()) == [1, 2]

    halves = [claimed[: len(claimed) // 2], claimed[len(claimed) // 2 :]]
    shards_of = [{j.descriptor.split(":")[1][1:] for j in half} for half in halves]
    result = service.ack(queue_name, failed=[Ack(j.descriptor) for j in halves[0]])
    assert len(result.acked) == len(halves[0])
    assert trips.take() == dict.fromkeys(shards_of[0], 1)  # no read before the write
    result = service.ack(queue_name, succeeded=[Ack(j.descriptor) for j in halves[1]])
    assert len(result.acked) == len(halves[1])
    assert trips.take() == dict.fromkeys(shards_of[1], 1)
