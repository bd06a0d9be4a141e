"""The control store on Redis: queue configs, shared rate buckets, the
idempotency keys of enqueues, per-minute event counters and the records of
tools (a log and a map of JSON documents, e.g. the dashboard's audit log).

Configs are one hash, ``plc:queues`` (name -> ``QueueConfig.to_json()``).
Rate buckets are hashes ``plc:rate:{bucket}`` (tokens, ts) changed only by
``lua/rate_acquire.lua`` and ``lua/rate_release.lua``, which read the
server's clock, so every process shares one bucket on one clock. The bucket
of a queue is named after the queue (``delete_queue`` drops it).

Concurrency slots (``pinlater.engine.slots``): per capped queue a hash
``plc:held:{queue}`` (``#`` -> total held, owner -> held) and a zset
``plc:synced:{queue}`` (owner -> ms last synced), changed only by
``lua/slots_sync.lua`` and ``lua/slots_settle.lua``.

Idempotency keys (``pinlater.engine.idempotency``): one string per key,
``plc:idem:{key}``, with a TTL: empty while reserved, the JSON list of
descriptors once remembered. ``SET NX PX`` makes the reservation atomic.

Event counters (enqueued, dequeued, succeeded, ...; the dashboard's rates
and /metrics): one hash per minute, ``plc:counts:{minute}``, fields
``queue:event``, expiring after ``RETENTION_MINUTES``.

Batches: ``pinlater.stores.redis.batches``.

Records (``pld:``, apart from the job service's keys): ``pld:log:{name}`` a
list, newest at the head, capped; ``pld:map:{name}`` a hash key -> JSON.

Like the shard backend, the client never re-sends a command by itself: a
re-sent acquire would take tokens twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from pinlater.errors import ShardConnectionFailed
from pinlater.queue_config import QueueConfig, read_stored_config, read_stored_configs
from pinlater.stores.base import ShardOutcomeUnknown
from pinlater.stores.control import (
    BUCKET_IDLE_MIN_MS,
    RETENTION_MINUTES,
    Counts,
    Doc,
    decode_descriptors,
    flatten_counts,
)
from pinlater.stores.redis import keys, loader
from pinlater.stores.redis.batches import BATCH_SCRIPTS, RedisBatches
from pinlater.stores.redis.errors import redis_guard
from pinlater.stores.redis.layout import REDIS_CONTROL, check_redis_layout
from pinlater.stores.redis.pool import open_redis

if TYPE_CHECKING:
    from redis.commands.core import Script

_T = TypeVar("_T")



class RedisControlStore(RedisBatches):
    """ControlStore over one Redis server/db."""

    def __init__(self, client: redis.Redis[bytes]) -> None:
        self._r = client
        registered = loader.register(client, "pinlater.stores.redis", (
            "rate_acquire", "rate_release", "slots_sync", "slots_settle", "key_slots_sync", "key_slots_settle",
            *BATCH_SCRIPTS))
        self._acquire: Script = registered["rate_acquire"]
        self._release: Script = registered["rate_release"]
        self._scripts = registered
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
        # A command sent, then silence: it may have run (the caps' steps
        # must not free the same slots twice), as the MySQL pool says too.
        return redis_guard("redis control store", ShardConnectionFailed, ShardOutcomeUnknown)

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

    def replace_queue(self, current: QueueConfig, updated: QueueConfig) -> bool:
        def run() -> bool:
            # WATCH is per key: a change to any queue's config makes this
            # try fail and the caller read again (config changes are rare).
            with self._r.pipeline(transaction=True) as pipe:
                pipe.watch(keys.CONTROL_QUEUES)
                raw: bytes | None = pipe.hget(keys.CONTROL_QUEUES, current.name)  # type: ignore[assignment]  # watching: run at once
                if raw is None or read_stored_config(current.name, raw) != current:
                    return False
                pipe.multi()
                pipe.hset(keys.CONTROL_QUEUES, updated.name, updated.to_json())
                try:
                    pipe.execute()
                except redis.WatchError:
                    return False
                return True

        return bool(self._call(run))

    def delete_queue(self, name: str) -> None:
        def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            pipe.hdel(keys.CONTROL_QUEUES, name)
            pipe.delete(keys.rate_key(name))
            pipe.delete(keys.slots_key(name), keys.slots_at_key(name))
            pipe.delete(keys.key_slots_key(name), keys.key_slots_at_key(name))
            pipe.execute()

        self._call(run)

    # -- rate buckets ----------------------------------------------------------

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        return self.acquire_many([bucket], wanted, rate, burst)[0]

    def acquire_many(self, buckets: Sequence[str], wanted: int, rate: float, burst: float) -> list[int]:
        if wanted <= 0 or rate <= 0 or not buckets:
            return [0] * len(buckets)
        args = [wanted, repr(float(rate)), repr(float(burst)), BUCKET_IDLE_MIN_MS]
        with self._guard():
            taken = loader.call(self._r, self._acquire, [keys.rate_key(b) for b in buckets], args)
        return [int(n) for n in taken]

    def release(self, bucket: str, count: int, burst: float) -> None:
        self.release_many({bucket: count}, burst)

    def release_many(self, counts: Mapping[str, int], burst: float) -> None:
        given = {b: n for b, n in counts.items() if n > 0}
        if not given:
            return
        with self._guard():
            loader.call(self._r, self._release, [keys.rate_key(b) for b in given],
                        [repr(float(burst)), *given.values()])

    # -- concurrency slots ----------------------------------------------------
    def _slots(self, name: str, queue: str, args: Sequence[object]) -> Any:
        with self._guard():
            return loader.call(self._r, self._scripts[name], [keys.slots_key(queue), keys.slots_at_key(queue)],
                               list(args))

    def slots_sync(
        self, queue: str, cap: int, owner: str, want: int, give_back: int = 0,
        frees: Mapping[str, int] | None = None, leaving: bool = False, first: bool = False,
    ) -> tuple[int, int] | None:
        pairs = [v for o, n in (frees or {}).items() for v in (o, n)]
        mode = 1 if leaving else 2 if first else 0
        granted, held = self._slots("slots_sync", queue, [cap, owner, want, give_back, mode, *pairs])
        return None if int(granted) < 0 else (int(granted), int(held))

    def slots_owners(self, queue: str) -> tuple[int, dict[str, tuple[int, int]]]:
        def run() -> tuple[int, dict[str, tuple[int, int]]]:
            pipe = self._r.pipeline(transaction=True)
            pipe.time()
            pipe.hgetall(keys.slots_key(queue))
            pipe.zrange(keys.slots_at_key(queue), 0, -1, withscores=True)
            (sec, usec), held, stamps = pipe.execute()
            at = {o.decode(): int(ms) for o, ms in stamps}
            counts = {o.decode(): int(n) for o, n in held.items() if o != b"#"}
            owners = {o: (counts.get(o, 0), at.get(o, 0)) for o in {*counts, *at}}
            return sec * 1000 + usec // 1000, owners

        return self._call(run)

    def slots_settle(self, queue: str, counts: Mapping[str, int], stale_before_ms: int) -> int:
        if not counts:
            return 0
        pairs = [v for o, n in counts.items() for v in (o, n)]
        return int(self._slots("slots_settle", queue, [stale_before_ms, *pairs]))

    def slots_drop(self, queue: str) -> None:
        self._call(lambda: self._r.delete(keys.slots_key(queue), keys.slots_at_key(queue)))

    # -- per-key slots ----------------------------------------------------------
    def _key_slots(self, name: str, queue: str, args: Sequence[object]) -> Any:
        with self._guard():
            return loader.call(self._r, self._scripts[name],
                               [keys.key_slots_key(queue), keys.key_slots_at_key(queue)], list(args))

    def key_slots_sync(
        self, queue: str, cap: int, owner: str, want: Mapping[str, int],
        frees: Mapping[tuple[str, str], int] | None = None, leaving: bool = False,
    ) -> dict[str, int]:
        freeing = [v for (o, k), n in (frees or {}).items() if n > 0 for v in (o, k, n)]
        wanted = list(want)
        args = [cap, owner, 1 if leaving else 0, len(freeing) // 3, *freeing,
                *(v for k in wanted for v in (k, max(0, want[k])))]
        granted = self._key_slots("key_slots_sync", queue, args)
        return {k: int(g) for k, g in zip(wanted, granted, strict=True)}

    def key_slots_owners(self, queue: str) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
        def run() -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
            pipe = self._r.pipeline(transaction=True)
            pipe.time()
            pipe.hgetall(keys.key_slots_key(queue))
            pipe.zrange(keys.key_slots_at_key(queue), 0, -1, withscores=True)
            (sec, usec), fields, stamps = pipe.execute()
            held: dict[tuple[str, str], int] = {}
            for field, n in fields.items():
                owner, _, key = field.partition(b"\0")
                if owner != b"#" and key:
                    held[(owner.decode(), key.decode())] = int(n)
            return sec * 1000 + usec // 1000, {o.decode(): int(ms) for o, ms in stamps}, held

        return self._call(run)

    def key_slots_settle(self, queue: str, counts: Mapping[tuple[str, str], int], stale_before_ms: int) -> int:
        if not counts:
            return 0
        triples = [v for (o, k), n in counts.items() for v in (o, k, n)]
        return int(self._key_slots("key_slots_settle", queue, [stale_before_ms, *triples]))

    def key_slots_drop(self, queue: str) -> None:
        self._call(lambda: self._r.delete(keys.key_slots_key(queue), keys.key_slots_at_key(queue)))

    # -- idempotency keys of enqueues -------------------------------------------

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        with self._guard():
            return bool(self._r.set(keys.idempotency_key(key), b"", nx=True, px=max(1, ttl_ms)))

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        with self._guard():
            self._r.set(keys.idempotency_key(key), json.dumps(list(descriptors)), px=max(1, ttl_ms))

    def recall_enqueue(self, key: str) -> list[str] | None:
        with self._guard():
            raw = self._r.get(keys.idempotency_key(key))
        return None if raw is None else decode_descriptors(raw)

    def forget_enqueue(self, key: str) -> None:
        with self._guard():
            self._r.delete(keys.idempotency_key(key))

    # -- event counters ----------------------------------------------------------

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        rows = flatten_counts(counts)
        if not rows:
            return
        with self._guard():
            pipe = self._r.pipeline(transaction=False)
            for queue, event, n in rows:
                pipe.hincrby(keys.counts_key(minute), f"{queue}:{event}", n)
            pipe.expire(keys.counts_key(minute), RETENTION_MINUTES * 60)
            pipe.execute()

    def read_counts(self, since_minute: int, until_minute: int) -> Counts:
        minutes = list(range(since_minute, until_minute + 1))
        with self._guard():
            pipe = self._r.pipeline(transaction=False)
            for minute in minutes:
                pipe.hgetall(keys.counts_key(minute))
            replies: list[dict[bytes, bytes]] = pipe.execute()
        out: Counts = {}
        for minute, fields in zip(minutes, replies, strict=True):
            for field, value in fields.items():
                queue, _, event = field.decode().rpartition(":")
                out.setdefault(minute, {}).setdefault(queue, {})[event] = int(value)
        return out

    # -- records -------------------------------------------------------------------

    def log_append(self, log: str, doc: Doc, cap: int) -> None:
        key = keys.records_log_key(log)
        with self._guard():
            pipe = self._r.pipeline(transaction=True)
            pipe.lpush(key, json.dumps(doc, sort_keys=True))
            pipe.ltrim(key, 0, cap - 1)
            pipe.execute()

    def log_recent(self, log: str, limit: int) -> list[Doc]:
        with self._guard():
            raw = self._r.lrange(keys.records_log_key(log), 0, limit - 1)
        return [json.loads(r) for r in raw]

    def map_put(self, table: str, key: str, doc: Doc) -> None:
        with self._guard():
            self._r.hset(keys.records_map_key(table), key, json.dumps(doc, sort_keys=True))

    def map_items(self, table: str) -> dict[str, Doc]:
        with self._guard():
            raw = self._r.hgetall(keys.records_map_key(table))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def map_remove(self, table: str, keys_: Sequence[str]) -> None:
        if keys_:
            with self._guard():
                self._r.hdel(keys.records_map_key(table), *keys_)

    def close(self) -> None:
        self._r.close()
        self._r.connection_pool.disconnect()
