"""Idempotency keys of enqueues (``pinlater.engine.idempotency``) in the Redis and
MySQL control stores, as mixins for their classes:

    class RedisControlStore(RedisIdempotencyMixin): ...   # uses self._r, self._guard()
    class MySQLControlStore(MySQLIdempotencyMixin): ...   # uses self._pool

Redis: one string per key, ``plc:idem:{key}``, with a TTL: empty while
reserved, the JSON list of descriptors once remembered. ``SET NX PX`` makes
the reservation atomic.

MySQL: table ``pinlater_idempotency`` (created with the control store's tables): key, JSON
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

from pinlater.kit.sqlblocks import sql
from pinlater.storage.keys import idempotency_key

if TYPE_CHECKING:
    import redis

    from pinlater.storage.mysql_pool import Session

T = TypeVar("T")

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
            return bool(self._r.set(idempotency_key(key), b"", nx=True, px=max(1, ttl_ms)))

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        with self._guard():
            self._r.set(idempotency_key(key), json.dumps(list(descriptors)), px=max(1, ttl_ms))

    def recall_enqueue(self, key: str) -> list[str] | None:
        with self._guard():
            raw = self._r.get(idempotency_key(key))
        return None if raw is None else _decode(raw)

    def forget_enqueue(self, key: str) -> None:
        with self._guard():
            self._r.delete(idempotency_key(key))


PURGE_EVERY = 100  # on average, one remember in this many purges expired keys


class MySQLIdempotencyMixin:
    """SQL in backends/sql/mysql.sql (idem_* blocks); the table is created
    with the control store's others."""

    if TYPE_CHECKING:

        def _run(self, work: Callable[[Session], T], transaction: bool = False) -> T: ...

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        def work(s: Session) -> bool:
            s.execute(sql("idem_delete_expired_key"), {"k": key})
            return s.execute(sql("idem_reserve"), {"k": key, "ttl": max(1, ttl_ms)}) == 1

        return self._run(work)

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        args = {"k": key, "d": json.dumps(list(descriptors)), "ttl": max(1, ttl_ms)}

        def work(s: Session) -> None:
            s.execute(sql("idem_remember"), args)
            if random.randrange(PURGE_EVERY) == 0:
                s.execute(sql("idem_purge"))

        self._run(work)

    def recall_enqueue(self, key: str) -> list[str] | None:
        def work(s: Session) -> tuple[tuple[Any, ...], ...]:
            s.execute(sql("idem_recall"), {"k": key})
            return s.fetchall()

        rows = self._run(work)
        return _decode(rows[0][0]) if rows else None

    def forget_enqueue(self, key: str) -> None:
        self._run(lambda s: s.execute(sql("idem_forget"), {"k": key}))


__all__ = ["MySQLIdempotencyMixin", "RedisIdempotencyMixin"]
