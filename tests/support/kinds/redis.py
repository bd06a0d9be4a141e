"""The Redis kind's test setups: one shard, one shard per local Redis, and
over TLS with an ACL user and a client certificate (scripts/services'
TLS-only Redis). Every test uses fresh queue names, so sessions share the
databases."""

from __future__ import annotations

from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, redis_tls_url, redis_url
from tests.support.stores import Setup

SETUPS = {
    "redis": Setup(
        lambda: f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}",
        lambda: redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
    ),
    "redis_sharded": Setup(
        lambda: ",".join(f"r{i + 1}={redis_url(port, REDIS_SHARD_DB)}" for i, port in enumerate(REDIS_PORTS)),
        lambda: redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
    ),
    "redis_tls": Setup(
        lambda: f"r1={redis_tls_url(REDIS_SHARD_DB, client_cert=True)}",
        lambda: redis_tls_url(REDIS_CONTROL_DB, client_cert=True),
        tls=True,
    ),
}
