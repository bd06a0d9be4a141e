"""The Redis kind (``redis://``, ``rediss://`` for TLS): shards as sorted sets
and job hashes changed only by Lua scripts (``shard``, ``lua/``), the control
store (``control``), the pool (``pool``), every key name (``keys``), the
layout record and migration steps (``layout``) and the error guard
(``errors``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pinlater.stores import StoreKind

if TYPE_CHECKING:
    from pinlater.stores import Say
    from pinlater.stores.base import ShardBackend
    from pinlater.stores.control import ControlStore


def _open_shard(shard_id: str, url: str, socket_timeout_s: float) -> ShardBackend:
    from pinlater.stores.redis.shard import RedisBackend

    return RedisBackend.from_url(shard_id, url, socket_timeout_s=socket_timeout_s)


def _open_control(url: str, socket_timeout_s: float) -> ControlStore:
    from pinlater.stores.redis.control import RedisControlStore

    return RedisControlStore.from_url(url, socket_timeout_s=socket_timeout_s)


def _migrate(url: str, is_shard: bool, where: str, timeout_s: float, dry_run: bool, say: Say) -> None:
    from pinlater.stores.redis.layout import migrate

    migrate(url, is_shard, where, timeout_s, dry_run, say)


KIND = StoreKind("redis", ("redis", "rediss"), _open_shard, _open_control, _migrate)
