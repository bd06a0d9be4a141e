"""Open the control store named by a URL."""

from __future__ import annotations

from pinlater.control.base import ControlStore
from pinlater.storage.urls import redact


def open_control_store(url: str, socket_timeout_s: float = 5.0) -> ControlStore:
    scheme = url.split("://", 1)[0]
    if scheme in ("redis", "rediss"):
        from pinlater.control.redis_control import RedisControlStore

        return RedisControlStore.from_url(url, socket_timeout_s=socket_timeout_s)
    if scheme == "mysql":
        from pinlater.control.mysql_control import MySQLControlStore

        return MySQLControlStore.from_url(url, socket_timeout_s=socket_timeout_s)
    if scheme == "memory":
        from pinlater.control.memory_control import MemoryControlStore

        return MemoryControlStore.shared(url)
    raise ValueError(f"unsupported control store URL {redact(url)!r}")
