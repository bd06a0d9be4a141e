"""Helpers shared by the Redis integration suites: db 9 of the first local
test Redis (the shared suites use 1 and 2), started if it does not answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from pinlater.states import JobState
from pinlater.stores.base import ClaimedJob, EnqueueItem, JobRecord
from pinlater.stores.redis.shard import RedisBackend
from tests.servers import REDIS_PORTS, redis_cli, redis_db, redis_url

PORT = REDIS_PORTS[0]
URL = redis_url(PORT, redis_db(9))
# The queue the Redis backend suites use (their db is flushed per test).
Q = "jobs"
P, R, S, F = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED


def ensure_redis() -> None:
    client = redis.Redis.from_url(URL, socket_timeout=2)
    try:
        client.ping()
        return
    except redis.ConnectionError:
        pass
    redis_cli("start-redis", str(PORT))  # only Redis: these tests need no MariaDB
    wait_for_ping(client, 30)


def wait_for_ping(client: redis.Redis[bytes], timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Returns once a starting server answers; its ConnectionError after
    ``timeout_s``, or as soon as ``alive()`` says its process is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline or not alive():
                raise
            time.sleep(0.05)


def item(body: bytes = b"b", priority: int = 1, run_after: int | None = None, attempts: int = 3,
         status: str = "") -> EnqueueItem:  # fmt: skip
    return EnqueueItem(body, priority, run_after, attempts, status)


def one(be: RedisBackend, local_id: int, priority: int = 1, body: bool = False) -> JobRecord:
    [rec] = be.lookup(Q, priority, [local_id], body)
    assert rec is not None
    return rec


def claim_one(be: RedisBackend, source: str = "w", attempts: int = 3) -> ClaimedJob:
    be.enqueue(Q, [item(attempts=attempts)])
    [job] = be.dequeue(Q, [1], 1, source).jobs
    return job


def counts(be: RedisBackend, priority: int = 1) -> tuple[int, int, int, int]:
    return (
        be.count(Q, priority, P, False) + be.count(Q, priority, P, True),
        be.count(Q, priority, R, False),
        be.count(Q, priority, S, False),
        be.count(Q, priority, F, False),
    )
