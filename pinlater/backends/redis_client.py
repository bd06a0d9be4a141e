"""The one way this project opens a Redis connection pool."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# Enough for a Thrift server's threads plus background work; beyond it a
# caller waits (BlockingConnectionPool) instead of failing, since a full
# pool is load, not an outage.
MAX_CONNECTIONS = 256
POOL_EXHAUSTED = "No connection available"


def open_redis(url: str, socket_timeout_s: float) -> redis.Redis[bytes]:
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=socket_timeout_s,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        # No silent retries: a retried script could enqueue twice or make an
        # ACK that was applied look stale.
        retry=Retry(NoBackoff(), 0),
    )
    return redis.Redis(connection_pool=pool, decode_responses=False)


def is_pool_exhausted(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.ConnectionError) and POOL_EXHAUSTED in str(exc)
