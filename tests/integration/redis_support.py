"""Helpers shared by the Redis integration suites: db 9 of the first local
test Redis (the shared suites use 1 and 2), started if it does not answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from tests.servers import REDIS_PORTS, redis_cli, redis_db, redis_url

PORT = REDIS_PORTS[0]
URL = redis_url(PORT, redis_db(9))


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
