"""A process-local control store for tests and single-process use: one
store per memory:// URL within a process."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

from pinlater.queue_config import QueueConfig
from pinlater.stores.control import Doc, TokenBuckets
from pinlater.stores.memory.batches import MemoryBatches


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MemoryControlStore(MemoryBatches):
    _shared: ClassVar[dict[str, MemoryControlStore]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._queues: dict[str, QueueConfig] = {}
        self._buckets = TokenBuckets()
        self._counts: dict[int, dict[str, dict[str, int]]] = {}  # minute -> queue -> event -> n
        self._enqueues: dict[str, tuple[float, list[str]]] = {}  # idempotency key -> (expires at, descriptors)
        # Records as JSON text, so a caller's later change to a document is not seen.
        self._logs: dict[str, list[str]] = {}
        self._maps: dict[str, dict[str, str]] = {}
        self._slots: dict[str, dict[str, tuple[int, int]]] = {}  # queue -> owner -> (held, ms synced)
        # queue -> ((owner, key) -> held, owner -> ms synced)
        self._key_slots: dict[str, tuple[dict[tuple[str, str], int], dict[str, int]]] = {}

    @classmethod
    def shared(cls, url: str) -> MemoryControlStore:
        """One store per memory:// URL within a process."""
        with cls._shared_lock:
            return cls._shared.setdefault(url, cls())

    def get_queue(self, name: str) -> QueueConfig | None:
        with self._lock:
            return self._queues.get(name)

    def list_queues(self) -> dict[str, QueueConfig]:
        with self._lock:
            return dict(self._queues)

    def queue_config_texts(self) -> dict[str, str | bytes]:
        return {name: config.to_json() for name, config in self.list_queues().items()}

    def create_queue(self, config: QueueConfig) -> bool:
        with self._lock:
            if config.name in self._queues:
                return False
            self._queues[config.name] = config
            return True

    def put_queue(self, config: QueueConfig) -> None:
        with self._lock:
            self._queues[config.name] = config

    def replace_queue(self, current: QueueConfig, updated: QueueConfig) -> bool:
        with self._lock:
            if self._queues.get(current.name) != current:
                return False
            self._queues[updated.name] = updated
            return True

    def delete_queue(self, name: str) -> None:
        with self._lock:
            self._queues.pop(name, None)
            self._buckets.drop(name)
            self._slots.pop(name, None)
            self._key_slots.pop(name, None)

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        return self._buckets.acquire(bucket, wanted, rate, burst)

    def release(self, bucket: str, count: int, burst: float) -> None:
        self._buckets.release(bucket, count, burst)

    def acquire_many(self, buckets: Sequence[str], wanted: int, rate: float, burst: float) -> list[int]:
        return [self._buckets.acquire(b, wanted, rate, burst) for b in buckets]

    def release_many(self, counts: Mapping[str, int], burst: float) -> None:
        for bucket, n in counts.items():
            self._buckets.release(bucket, n, burst)

    # -- concurrency slots -------------------------------------------------------
    def slots_sync(
        self, queue: str, cap: int, owner: str, want: int, give_back: int = 0,
        frees: Mapping[str, int] | None = None, leaving: bool = False, first: bool = False,
    ) -> tuple[int, int] | None:
        with self._lock:
            held = self._slots.setdefault(queue, {})
            if first and owner in held:
                return None
            for o, n in (frees or {}).items():
                if o in held and held[o][1] != 0:  # stamp 0: left, the monitor's to count
                    h, at = held[o]
                    held[o] = (h - min(n, h), at)
            h, _ = held.get(owner, (0, 0))
            h -= min(give_back, h)
            total = sum(n for o, (n, _) in held.items() if o != owner) + h
            granted = max(0, min(want, cap - total))
            held[owner] = (h + granted, 0 if leaving else _now_ms())
            return granted, h + granted

    def slots_owners(self, queue: str) -> tuple[int, dict[str, tuple[int, int]]]:
        with self._lock:
            return _now_ms(), dict(self._slots.get(queue, {}))

    def slots_settle(self, queue: str, counts: Mapping[str, int], stale_before_ms: int) -> int:
        with self._lock:
            held = self._slots.setdefault(queue, {})
            freed = 0
            for o, n in counts.items():
                h, at = held.get(o, (0, 0))
                if o not in held or at < stale_before_ms:
                    freed += h - n
                    if n:
                        held[o] = (n, 0)
                    else:
                        held.pop(o, None)
            return freed

    def slots_drop(self, queue: str) -> None:
        with self._lock:
            self._slots.pop(queue, None)

    # -- per-key slots -------------------------------------------------------------
    def key_slots_sync(
        self, queue: str, cap: int, owner: str, want: Mapping[str, int],
        frees: Mapping[tuple[str, str], int] | None = None, leaving: bool = False,
    ) -> dict[str, int]:
        with self._lock:
            held, stamps = self._key_slots.setdefault(queue, ({}, {}))
            for at, n in (frees or {}).items():
                left = held.get(at, 0) - max(0, n)
                if left > 0:
                    held[at] = left
                else:
                    held.pop(at, None)
            granted: dict[str, int] = {}
            for key, w in want.items():
                total = sum(n for (_, k), n in held.items() if k == key)
                granted[key] = g = max(0, min(w, cap - total))
                if g:
                    held[(owner, key)] = held.get((owner, key), 0) + g
            stamps[owner] = 0 if leaving else _now_ms()
            return granted

    def key_slots_owners(self, queue: str) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
        with self._lock:
            held, stamps = self._key_slots.get(queue, ({}, {}))
            return _now_ms(), dict(stamps), dict(held)

    def key_slots_settle(self, queue: str, counts: Mapping[tuple[str, str], int], stale_before_ms: int) -> int:
        with self._lock:
            held, stamps = self._key_slots.setdefault(queue, ({}, {}))
            freed = 0
            settled: set[str] = set()
            for at, n in counts.items():
                if stamps.get(at[0], -1) < stale_before_ms:
                    settled.add(at[0])
                    freed += held.get(at, 0) - n
                    if n > 0:
                        held[at] = n
                    else:
                        held.pop(at, None)
            holding = {o for o, _ in held}
            for owner in settled:
                if owner in holding:
                    stamps[owner] = 0
                else:
                    stamps.pop(owner, None)
            return freed

    def key_slots_drop(self, queue: str) -> None:
        with self._lock:
            self._key_slots.pop(queue, None)

    # -- idempotent enqueue ------------------------------------------------------
    def _live_enqueue(self, key: str, now: float) -> list[str] | None:
        entry = self._enqueues.get(key)
        if entry is None or entry[0] <= now:
            self._enqueues.pop(key, None)
            return None
        return entry[1]

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._live_enqueue(key, now) is not None:
                return False
            if len(self._enqueues) > 10_000:
                self._enqueues = {k: v for k, v in self._enqueues.items() if v[0] > now}
            self._enqueues[key] = (now + ttl_ms / 1000, [])
            return True

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        with self._lock:
            self._enqueues[key] = (time.monotonic() + ttl_ms / 1000, list(descriptors))

    def recall_enqueue(self, key: str) -> list[str] | None:
        with self._lock:
            found = self._live_enqueue(key, time.monotonic())
            return None if found is None else list(found)

    def forget_enqueue(self, key: str) -> None:
        with self._lock:
            self._enqueues.pop(key, None)

    # -- event counters ----------------------------------------------------------
    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        with self._lock:
            bucket = self._counts.setdefault(minute, {})
            for queue, events in counts.items():
                for event, n in events.items():
                    per_queue = bucket.setdefault(queue, {})
                    per_queue[event] = per_queue.get(event, 0) + n

    def read_counts(self, since_minute: int, until_minute: int) -> dict[int, dict[str, dict[str, int]]]:
        with self._lock:
            return {
                m: {q: dict(e) for q, e in per_minute.items()}
                for m, per_minute in self._counts.items()
                if since_minute <= m <= until_minute
            }

    def log_append(self, log: str, doc: Doc, cap: int) -> None:
        with self._lock:
            entries = self._logs.setdefault(log, [])
            entries.insert(0, json.dumps(doc))
            del entries[cap:]

    def log_recent(self, log: str, limit: int) -> list[Doc]:
        with self._lock:
            return [json.loads(e) for e in self._logs.get(log, [])[:limit]]

    def map_put(self, table: str, key: str, doc: Doc) -> None:
        with self._lock:
            self._maps.setdefault(table, {})[key] = json.dumps(doc)

    def map_items(self, table: str) -> dict[str, Doc]:
        with self._lock:
            return {k: json.loads(v) for k, v in self._maps.get(table, {}).items()}

    def map_remove(self, table: str, keys_: Sequence[str]) -> None:
        with self._lock:
            for key in keys_:
                self._maps.get(table, {}).pop(key, None)

    def close(self) -> None:
        return None
