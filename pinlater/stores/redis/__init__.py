"""The Redis kind (``redis://``, ``rediss://`` for TLS): shards as sorted sets
and job hashes changed only by Lua scripts (``shard``, ``lua/``), the control
store (``control``), the pool (``pool``), every key name (``keys``), the
layout record and migration steps (``layout``) and the error guard
(``errors``)."""

from __future__ import annotations

from pinlater.stores import StoreKind, lazy

KIND = StoreKind(
    "redis",
    ("redis", "rediss"),
    open_shard=lazy("pinlater.stores.redis.shard:RedisBackend.from_url"),
    open_control=lazy("pinlater.stores.redis.control:RedisControlStore.from_url"),
    migrate=lazy("pinlater.stores.redis.layout:migrate"),
)
