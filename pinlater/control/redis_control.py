"""The control store on Redis: queue configs and shared rate buckets.

Configs are one hash, ``plc:queues`` (name -> ``QueueConfig.to_json()``).
Rate buckets are hashes ``plc:rate:{bucket}`` (tokens, ts) changed only by
``lua/rate_acquire.lua`` and ``lua/rate_release.lua``, which read the
server's clock, so every process shares one bucket on one clock. The bucket
of a queue is named after the queue (``delete_queue`` drops it).

Like the shard backend, the client never re-sends a command by itself: a
re-sent acquire would take tokens twice.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

import redis

from pinlater.control.counter_store import RedisCounterMixin
from pinlater.control.idempotency_store import RedisIdempotencyMixin
from pinlater.errors import ShardConnectionFailed
from pinlater.queue_config import QueueConfig, read_stored_config, read_stored_configs
from pinlater.storage import keys, scripts
from pinlater.storage.errors import redis_guard
from pinlater.storage.layout import check_redis_layout
from pinlater.storage.migrations import REDIS_CONTROL
from pinlater.storage.redis_pool import open_redis

if TYPE_CHECKING:
    from redis.commands.core import Script

_T = TypeVar("_T")

# Idle buckets expire after at least this long (longer if refilling to full
# takes longer, see rate_acquire.lua).
BUCKET_TTL_MS = 60_000


class RedisControlStore(RedisIdempotencyMixin, RedisCounterMixin):
    """ControlStore over one Redis server/db."""

    def __init__(self, client: redis.Redis[bytes]) -> None:
        self._r = client
        registered = scripts.register(client, "pinlater.control", ("rate_acquire", "rate_release"))
        self._acquire: Script = registered["rate_acquire"]
        self._release: Script = registered["rate_release"]
        self._layout_checked = False

    @classmethod
    def from_url(cls, url: str, socket_timeout_s: float = 5.0) -> RedisControlStore:
        client = open_redis(url, socket_timeout_s)
        return cls(client)

    def _guard(self) -> AbstractContextManager[None]:
        # Like the shard backend: the layout is checked before the first command.
        if not self._layout_checked:
            check_redis_layout(self._r, REDIS_CONTROL, "redis control store", ShardConnectionFailed)
            self._layout_checked = True
        return redis_guard("redis control store", ShardConnectionFailed)

    def _call(self, fn: Callable[[], _T]) -> _T:
        with self._guard():
            return fn()

    # -- queue configs -------------------------------------------------------

    def get_queue(self, name: str) -> QueueConfig | None:
        raw = self._call(lambda: self._r.hget(keys.CONTROL_QUEUES, name))
        return None if raw is None else read_stored_config(name, raw)

    def list_queues(self) -> dict[str, QueueConfig]:
        return read_stored_configs(self.queue_config_texts())

    def queue_config_texts(self) -> dict[str, str | bytes]:
        raw = self._call(lambda: self._r.hgetall(keys.CONTROL_QUEUES))
        return {k.decode("utf-8", errors="replace"): v for k, v in raw.items()}

    def create_queue(self, config: QueueConfig) -> bool:
        created = self._call(lambda: self._r.hsetnx(keys.CONTROL_QUEUES, config.name, config.to_json()))
        return bool(created)

    def put_queue(self, config: QueueConfig) -> None:
        self._call(lambda: self._r.hset(keys.CONTROL_QUEUES, config.name, config.to_json()))

    def delete_queue(self, name: str) -> None:
        def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            pipe.hdel(keys.CONTROL_QUEUES, name)
            pipe.delete(keys.rate_key(name))
            pipe.execute()

        self._call(run)

    # -- rate buckets ----------------------------------------------------------

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        if wanted <= 0 or rate <= 0:
            return 0
        args = [wanted, repr(float(rate)), repr(float(burst)), BUCKET_TTL_MS]
        with self._guard():
            taken = scripts.call(self._r, self._acquire, [keys.rate_key(bucket)], args)
        return int(taken)

    def release(self, bucket: str, count: int, burst: float) -> None:
        if count <= 0:
            return
        with self._guard():
            scripts.call(self._r, self._release, [keys.rate_key(bucket)], [count, repr(float(burst))])

    def close(self) -> None:
        self._r.close()
        self._r.connection_pool.disconnect()
