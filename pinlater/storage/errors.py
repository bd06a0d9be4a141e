"""The one Redis error guard and the one MySQL "missing table" retry of the
project, shared by the shard backends, the control stores and the
dashboard's records.

Redis: a full pool is load (``ShardBusy``), an unusable server is an outage
(the caller's own "unavailable" error), a server that refuses to write
(OOM, READONLY, MISCONF, NOREPLICAS) raises ``ShardWriteRefused``, anything
else is one command failing (``StorageError``); every message is one line
that names the store. (MySQL's write refusals are told apart where its error
codes are known, ``pinlater.storage.mysql_pool``.)

MySQL: a table of ours gone missing (the database was dropped and created
again, or a queue was created while a shard was down) is created again and
the work retried once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import redis

from pinlater.backends.base import ShardBusy, ShardWriteRefused
from pinlater.errors import StorageError
from pinlater.storage.mysql_pool import NO_SUCH_TABLE, ConnectionPool, MySQLStorageError, Session, error_code
from pinlater.storage.redis_pool import describe, is_pool_exhausted, is_unusable, is_write_refused

T = TypeVar("T")


class RedisGuard:
    """A ``with`` block that turns redis-py's errors inside it into the job
    service's, each message starting with ``where`` (e.g. ``redis shard r1``).
    It keeps no state between blocks, so one object serves every call of
    its store: a generator-based context manager cost ~1 µs per command."""

    __slots__ = ("unavailable", "where")

    def __init__(self, where: str, unavailable: Callable[[str], Exception]) -> None:
        self.where = where
        self.unavailable = unavailable

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, redis.exceptions.RedisError):
            return
        where = self.where
        if is_pool_exhausted(exc):
            raise ShardBusy(f"{where}: every pooled connection is busy") from exc
        if is_unusable(exc):
            raise self.unavailable(f"{where} unavailable: {describe(exc)}") from exc
        if is_write_refused(exc):
            raise ShardWriteRefused(f"{where} refuses writes: {describe(exc)}") from exc
        raise StorageError(f"{where}: {describe(exc)}") from exc


def redis_guard(where: str, unavailable: Callable[[str], Exception]) -> RedisGuard:
    """Turn redis-py's errors inside the block into the job service's, each
    message starting with ``where`` (e.g. ``redis shard r1``)."""
    return RedisGuard(where, unavailable)


def run_creating_missing_tables(
    pool: ConnectionPool,
    work: Callable[[Session], T],
    *,
    transaction: bool = False,
    create: Callable[[], None] | None = None,
) -> T:
    """``work`` on ``pool``; should a table be missing (MySQL error 1146),
    the pool's own tables are prepared again, ``create`` makes any others
    the work needs, and the work runs once more."""
    try:
        return pool.run(work, transaction=transaction)
    except MySQLStorageError as exc:
        if error_code(exc) != NO_SUCH_TABLE:
            raise
    pool.invalidate_schema()
    if create is not None:
        create()
    return pool.run(work, transaction=transaction)
