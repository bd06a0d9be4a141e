"""Shard backends, chosen by URL scheme."""

from __future__ import annotations

from pinlater.backends.base import ShardBackend, ShardUnavailable
from pinlater.settings import ShardSpec
from pinlater.storage.urls import redact

__all__ = ["ShardBackend", "ShardUnavailable", "open_backend"]


def open_backend(spec: ShardSpec, socket_timeout_s: float = 5.0) -> ShardBackend:
    scheme = spec.url.split("://", 1)[0]
    if scheme in ("redis", "rediss"):
        from pinlater.backends.redis_backend import RedisBackend

        return RedisBackend.from_url(spec.id, spec.url, socket_timeout_s=socket_timeout_s)
    if scheme == "mysql":
        from pinlater.backends.mysql_backend import MySQLBackend

        return MySQLBackend.from_url(spec.id, spec.url, socket_timeout_s=socket_timeout_s)
    if scheme == "memory":
        from pinlater.backends.memory_backend import MemoryBackend

        return MemoryBackend(spec.id)
    raise ValueError(f"unsupported shard URL {redact(spec.url)!r}")
