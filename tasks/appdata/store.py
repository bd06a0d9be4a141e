"""``AppData``: the shard map and one connection pool per server. Every
other module takes one and asks it where a shard lives."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TypeVar

from pymysql.cursors import Cursor

from tasks.appdata.db import ServerPool
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.shardmap import Server, ShardLocation, ShardMap

T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AppData:
    def __init__(self, settings: AppDataSettings | None = None) -> None:
        self.settings = settings or AppDataSettings()
        self.shard_map: ShardMap = self.settings.shard_map
        self._pools = {
            server: ServerPool(server, socket_timeout_s=self.settings.socket_timeout_s)
            for server in self.shard_map.servers
        }

    @classmethod
    def from_env(cls) -> AppData:
        return cls(AppDataSettings.from_env())

    def locate(self, shard: int) -> ShardLocation:
        return self.shard_map.locate(shard)

    def pool(self, server: Server) -> ServerPool:
        return self._pools[server]

    def run(self, shard: int, work: Callable[[Cursor, str], T]) -> T:
        """``work(cursor, database)`` on the server of ``shard``."""
        where = self.locate(shard)

        def call(cursor: Cursor) -> T:
            return work(cursor, where.database)

        call = functools.wraps(work)(call)  # named as ``work`` is, for the call's metrics and span
        return self._pools[where.server].run(call)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()

    def __enter__(self) -> AppData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
