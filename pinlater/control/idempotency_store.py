"""Idempotency keys of enqueues (``pinlater.idempotency``) in the Redis and
MySQL control stores, as mixins for their classes:

    class RedisControlStore(RedisIdempotencyMixin): ...   # uses self._r, self._guard()
    class MySQLControlStore(MySQLIdempotencyMixin): ...   # uses self._pool

Redis: one string per key, ``plc:idem:{key}``, with a TTL: empty while
reserved, the JSON list of descriptors once remembered. ``SET NX PX`` makes
the reservation atomic.

MySQL: table ``pinlater_idempotency`` (created on first use): key, JSON
descriptors (NULL while reserved), expiry in ms on the server's clock.
``INSERT IGNORE`` on the primary key makes the reservation atomic; expired
rows are deleted on the way and, now and then, in bulk.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import redis

    from pinlater.backends.mysql_pool import ConnectionPool, Session

T = TypeVar("T")

REDIS_PREFIX = "plc:idem:"


def _decode(raw: str | bytes | None) -> list[str]:
    if not raw:
        return []
    data = json.loads(raw)
    return [str(d) for d in data]


class RedisIdempotencyMixin:
    if TYPE_CHECKING:
        _r: redis.Redis[bytes]

        def _guard(self) -> AbstractContextManager[None]: ...

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        with self._guard():
            return bool(self._r.set(REDIS_PREFIX + key, b"", nx=True, px=max(1, ttl_ms)))

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        with self._guard():
            self._r.set(REDIS_PREFIX + key, json.dumps(list(descriptors)), px=max(1, ttl_ms))

    def recall_enqueue(self, key: str) -> list[str] | None:
        with self._guard():
            raw = self._r.get(REDIS_PREFIX + key)
        return None if raw is None else _decode(raw)

    def forget_enqueue(self, key: str) -> None:
        with self._guard():
            self._r.delete(REDIS_PREFIX + key)


# The server's clock in ms (as the ``_now`` block of backends/sql/mysql.sql).
_NOW = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
NO_SUCH_TABLE = 1146
PURGE_EVERY = 100  # on average, one remember in this many purges expired keys
MYSQL_SQL = {
    "idem_create_table": """CREATE TABLE IF NOT EXISTS pinlater_idempotency (
  k VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
  descriptors MEDIUMTEXT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (k),
  KEY by_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    "idem_delete_expired_key": f"DELETE FROM pinlater_idempotency WHERE k = %(k)s AND expires_at <= {_NOW}",
    "idem_reserve": "INSERT IGNORE INTO pinlater_idempotency (k, descriptors, expires_at) "
    f"VALUES (%(k)s, NULL, {_NOW} + %(ttl)s)",
    "idem_remember": "INSERT INTO pinlater_idempotency (k, descriptors, expires_at) "
    f"VALUES (%(k)s, %(d)s, {_NOW} + %(ttl)s) "
    "ON DUPLICATE KEY UPDATE descriptors = VALUES(descriptors), expires_at = VALUES(expires_at)",
    "idem_recall": f"SELECT descriptors FROM pinlater_idempotency WHERE k = %(k)s AND expires_at > {_NOW}",
    "idem_forget": "DELETE FROM pinlater_idempotency WHERE k = %(k)s",
    "idem_purge": f"DELETE FROM pinlater_idempotency WHERE expires_at <= {_NOW} LIMIT 1000",
}


class MySQLIdempotencyMixin:
    if TYPE_CHECKING:
        _pool: ConnectionPool

    def _idem_run(self, work: Callable[[Session], T]) -> T:
        """``work`` on a pooled connection, creating the table if it is missing."""
        import pymysql

        from pinlater.backends.mysql_pool import error_code

        try:
            return self._pool.run(work)
        except pymysql.err.ProgrammingError as exc:
            if error_code(exc) != NO_SUCH_TABLE:
                raise
        self._pool.run(lambda s: s.execute(MYSQL_SQL["idem_create_table"]))
        return self._pool.run(work)

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        def work(s: Session) -> bool:
            s.execute(MYSQL_SQL["idem_delete_expired_key"], {"k": key})
            return s.execute(MYSQL_SQL["idem_reserve"], {"k": key, "ttl": max(1, ttl_ms)}) == 1

        return self._idem_run(work)

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        args = {"k": key, "d": json.dumps(list(descriptors)), "ttl": max(1, ttl_ms)}

        def work(s: Session) -> None:
            s.execute(MYSQL_SQL["idem_remember"], args)
            if random.randrange(PURGE_EVERY) == 0:
                s.execute(MYSQL_SQL["idem_purge"])

        self._idem_run(work)

    def recall_enqueue(self, key: str) -> list[str] | None:
        def work(s: Session) -> tuple[tuple[Any, ...], ...]:
            s.execute(MYSQL_SQL["idem_recall"], {"k": key})
            return s.fetchall()

        rows = self._idem_run(work)
        return _decode(rows[0][0]) if rows else None

    def forget_enqueue(self, key: str) -> None:
        self._idem_run(lambda s: s.execute(MYSQL_SQL["idem_forget"], {"k": key}))


__all__ = ["MYSQL_SQL", "MySQLIdempotencyMixin", "RedisIdempotencyMixin"]
