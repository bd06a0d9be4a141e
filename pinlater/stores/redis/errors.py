"""The one Redis error guard of the project, shared by the Redis shard
backend and control store.

A full pool is load (``ShardBusy``), an unusable server is an outage
(the caller's own "unavailable" error, or its "outcome unknown" one when
the command had been sent: it may have run), a server that refuses to write
(OOM, READONLY, MISCONF, NOREPLICAS) raises ``ShardWriteRefused``, anything
else is one command failing (``StorageError``); every message is one line
that names the store.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from pinlater.errors import StorageError
from pinlater.stores.base import ShardBusy, ShardWriteRefused
from pinlater.stores.redis.pool import describe, is_after_send, is_pool_exhausted, is_unusable, is_write_refused


class RedisGuard:
    """A ``with`` block that turns redis-py's errors inside it into the job
    service's, each message starting with ``where`` (e.g. ``redis shard r1``).
    It keeps no state between blocks, so one object serves every call of
    its store: a generator-based context manager cost ~1 µs per command."""

    __slots__ = ("unavailable", "unknown", "where")

    def __init__(self, where: str, unavailable: Callable[[str], Exception],
                 unknown: Callable[[str], Exception] | None = None) -> None:
        self.where = where
        self.unavailable = unavailable
        self.unknown = unknown or unavailable

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, redis.exceptions.RedisError):
            return
        where = self.where
        if is_pool_exhausted(exc):
            raise ShardBusy(f"{where}: every pooled connection is busy") from exc
        if is_unusable(exc):
            if is_after_send(exc):
                raise self.unknown(f"{where} unavailable after a command was sent (it may have run): "
                                   f"{describe(exc)}") from exc
            raise self.unavailable(f"{where} unavailable: {describe(exc)}") from exc
        if is_write_refused(exc):
            raise ShardWriteRefused(f"{where} refuses writes: {describe(exc)}") from exc
        raise StorageError(f"{where}: {describe(exc)}") from exc


def redis_guard(where: str, unavailable: Callable[[str], Exception],
                unknown: Callable[[str], Exception] | None = None) -> RedisGuard:
    """Turn redis-py's errors inside the block into the job service's, each
    message starting with ``where`` (e.g. ``redis shard r1``)."""
    return RedisGuard(where, unavailable, unknown)
