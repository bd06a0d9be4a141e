"""What every control store provides, whatever its kind: queue configs,
shared rate buckets, idempotency keys of enqueues, per-minute event
counters, batches (``Batches``), and records for tools (a log and a map of JSON documents, where
the dashboard keeps its audit log and progress: every PinLater process
already depends on the control store, it is durable and shared, and it
outlives the machine a dashboard runs on)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pinlater.queue_config import QueueConfig

# Event counters are kept this long (a kind may purge older minutes lazily).
RETENTION_MINUTES = 180
Counts = dict[int, dict[str, dict[str, int]]]
Doc = dict[str, Any]


# A rate bucket idle long enough to be full again is dropped (it restarts
# full, which is what refilling would give): after at least the minimum,
# at most the maximum (beyond it a restart at full over-grants at most a
# burst). Redis expires the key (rate_acquire.lua states the same rule).
BUCKET_IDLE_MIN_MS = 60_000
BUCKET_IDLE_MAX_MS = 7 * 24 * 3_600_000


def bucket_idle_ms(rate: float, burst: float) -> int:
    """How long a bucket of ``rate`` tokens/s and ``burst`` is kept idle."""
    return min(BUCKET_IDLE_MAX_MS, max(BUCKET_IDLE_MIN_MS, math.ceil(burst / rate * 1000)))


def flatten_counts(counts: Mapping[str, Mapping[str, int]]) -> list[tuple[str, str, int]]:
    """``counts[queue][event]`` as (queue, event, n) rows, zeros left out."""
    return [(q, e, n) for q, events in counts.items() for e, n in events.items() if n]


def decode_descriptors(raw: str | bytes | None) -> list[str]:
    """The descriptors an idempotency key remembers, stored as a JSON list
    (empty while only reserved)."""
    if not raw:
        return []
    return [str(d) for d in json.loads(raw)]


class TokenBuckets:
    """Token buckets held by one process, on its monotonic clock: the memory
    kind's rate buckets, and the bucket a process falls back to while its
    control store is unreachable (``pinlater.engine.ratelimit``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # bucket -> (tokens, at seconds)

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        with self._lock:
            now = time.monotonic()
            tokens, at = self._buckets.get(bucket, (burst, now))
            tokens = min(burst, tokens + (now - at) * rate)
            granted = max(0, min(wanted, int(tokens)))
            self._buckets[bucket] = (tokens - granted, now)
            return granted

    def release(self, bucket: str, count: int, burst: float) -> None:
        with self._lock:
            if bucket in self._buckets and count > 0:
                tokens, at = self._buckets[bucket]
                self._buckets[bucket] = (min(burst, tokens + count), at)

    def drop(self, bucket: str) -> None:
        with self._lock:
            self._buckets.pop(bucket, None)


@runtime_checkable
class Records(Protocol):
    """The control store's records: a newest-first log of JSON documents and
    JSON documents by key in named maps."""

    def log_append(self, log: str, doc: Doc, cap: int) -> None:
        """Add ``doc`` at the head of ``log``, keeping at least the newest
        ``cap`` (a kind may keep all: MySQL never trims an audit log)."""

    def log_recent(self, log: str, limit: int) -> list[Doc]:
        """The newest ``limit`` documents of ``log``, newest first."""

    def map_put(self, table: str, key: str, doc: Doc) -> None:
        """Store ``doc`` under ``key`` of ``table``, replacing any."""

    def map_items(self, table: str) -> dict[str, Doc]:
        """Every document of ``table`` by key."""

    def map_remove(self, table: str, keys_: Sequence[str]) -> None:
        """Forget these keys of ``table`` (absent ones are no error)."""

    def close(self) -> None:
        """Release connections."""


# A batch's states (pinlater.engine.batches): jobs may join while OPEN (its
# maker has not sealed it) or SEALED with jobs still to end; COMPLETE once
# sealed and every job ended (its callback is due to be released);
# RELEASED once it is; CANCELLED by a cancel of the batch.
OPEN, SEALED, COMPLETE, RELEASED, CANCELLED = "open", "sealed", "complete", "released", "cancelled"
LIVE_BATCH_STATES = (OPEN, SEALED, COMPLETE)
# Batches whose jobs' ends are still recorded: a cancelled batch's too, so
# a cancel sent again goes over only the jobs that have not ended.
COUNTING_BATCH_STATES = (OPEN, SEALED, CANCELLED)
# A job's end, as a batch counts it.
ENDED_OK, ENDED_FAILED = "S", "F"


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A batch as its control store holds it: ``doc`` is its maker's (the
    callback's descriptor, a description); ``ended`` = succeeded + failed."""

    batch: str
    doc: Doc
    state: str
    total: int
    succeeded: int
    failed: int
    created_ms: int
    updated_ms: int

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed


@runtime_checkable
class Batches(Protocol):
    """Batches of jobs: which jobs (by descriptor) each holds and how each
    ended, kept so that every step is atomic in the store and counts a job
    once however often its end is told. A job is in one batch: joining
    another moves it."""

    def batch_create(self, batch: str, doc: Doc) -> bool:
        """A new batch ``batch`` (OPEN, no jobs) with its maker's ``doc``;
        False (nothing changed) if there is a batch of that id."""

    def batch_join(self, batch: str, descriptors: Sequence[str]) -> bool:
        """Add jobs to the batch, unless it is no longer OPEN or SEALED
        (False: nothing added). A job already in it is not counted twice."""

    def batch_seal(self, batch: str) -> bool:
        """OPEN -> SEALED (no more jobs from its maker). True if that made
        it COMPLETE (every job had ended): the caller releases its callback."""

    def batch_end(self, ended: Mapping[str, str]) -> list[str]:
        """Record how jobs ended (descriptor -> ENDED_OK or ENDED_FAILED):
        a job in no batch of COUNTING_BATCH_STATES, or whose end is known,
        is skipped. The
        batches this made COMPLETE (each returned to one caller only)."""

    def batch_state(self, batch: str, from_states: Sequence[str], to: str) -> bool:
        """Move the batch to ``to`` if it is in one of ``from_states``."""

    def batch_get(self, batch: str) -> BatchRecord | None:
        """The batch, or None if there is no such batch."""

    def batch_unended(self, batch: str, limit: int, cursor: str = "") -> tuple[list[str], str]:
        """About ``limit`` of the batch's jobs whose end is not known, from
        ``cursor`` ("" the start), and the cursor to go on from ("" at the end)."""

    def batch_list(
        self, states: Sequence[str], limit: int, idle_ms: int = 0, newest_first: bool = False,
        after: tuple[int, str] | None = None,
    ) -> list[BatchRecord]:
        """Up to ``limit`` batches in ``states``, last changed at least
        ``idle_ms`` ago, in (updated_ms, batch) order: the least recently
        changed first (the most recently, with ``newest_first``). ``after``
        (oldest first only): only batches past that (updated_ms, batch),
        so a caller walks them all a page at a time."""

    def batch_drop(self, batch: str) -> None:
        """Forget the batch and its jobs' membership."""


@runtime_checkable
class ControlStore(Records, Batches, Protocol):
    def get_queue(self, name: str) -> QueueConfig | None:
        """The queue's config, or None if no such queue."""

    def list_queues(self) -> dict[str, QueueConfig]:
        """Every queue's config by name."""

    def queue_config_texts(self) -> dict[str, str | bytes]:
        """Every queue's config as stored, unparsed: for tools (the
        dashboard) that must show a queue even when its config cannot be read."""

    def create_queue(self, config: QueueConfig) -> bool:
        """Store ``config`` unless the queue exists. True if created."""

    def put_queue(self, config: QueueConfig) -> None:
        """Store ``config``, replacing any existing one."""

    def replace_queue(self, current: QueueConfig, updated: QueueConfig) -> bool:
        """Store ``updated`` if the queue's stored config still reads as
        ``current``, in one atomic step; False if another writer changed
        it first (or it is gone), so a read-change-write loses nobody's change."""

    def delete_queue(self, name: str) -> None:
        """Forget the queue's config, its rate bucket and its slots. Idempotent."""

    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        """Token bucket shared by every process, on the store's clock: refill
        at ``rate`` tokens/s up to ``burst``, then take up to ``wanted``
        whole tokens. Returns how many were taken (0..wanted). A bucket that
        does not exist yet starts full."""

    def release(self, bucket: str, count: int, burst: float) -> None:
        """Give back ``count`` unused tokens (never above ``burst``)."""

    def acquire_many(self, buckets: Sequence[str], wanted: int, rate: float, burst: float) -> list[int]:
        """``acquire`` of each bucket, in one step: the tokens taken from each."""

    def release_many(self, counts: Mapping[str, int], burst: float) -> None:
        """``release`` of each bucket (bucket -> unused tokens), in one step."""

    # -- concurrency slots (pinlater.engine.slots) -----------------------------
    # A capped queue's slots are counted per owner (a process: its claims'
    # tokens start with its name), each owner stamped with the store's clock
    # when it last synced.
    def slots_sync(
        self, queue: str, cap: int, owner: str, want: int, give_back: int = 0,
        frees: Mapping[str, int] | None = None, leaving: bool = False, first: bool = False,
    ) -> tuple[int, int] | None:
        """One atomic step: free ``frees`` (other owner -> slots of its jobs
        whose claims ended elsewhere; never below 0), give back
        ``give_back`` of ``owner``'s, then take up to ``want`` more, never
        holding more than ``cap`` in all. Stamps ``owner`` now, or stale if
        ``leaving``. Returns (slots granted, slots ``owner`` holds now); or,
        for its ``first`` step, None and nothing changed if the name is
        known (owners stay known, holding nothing or not, until
        ``slots_settle`` forgets them)."""

    def slots_owners(self, queue: str) -> tuple[int, dict[str, tuple[int, int]]]:
        """The store's clock (ms) and every owner: (slots held, ms last
        synced; 0 if stale)."""

    def slots_settle(self, queue: str, counts: Mapping[str, int], stale_before_ms: int) -> int:
        """Each owner of ``counts`` not synced since ``stale_before_ms`` (or
        unknown) now holds exactly its count (0: forgotten); returns the
        slots freed (less those added)."""

    def slots_drop(self, queue: str) -> None:
        """Forget every slot of the queue."""

    # -- per-key slots (pinlater.engine.key_slots) -------------------------------
    # The same per owner, per fairness key of a queue with a key_max_running:
    # (owner, key) -> slots held, only while above 0.
    def key_slots_sync(
        self, queue: str, cap: int, owner: str, want: Mapping[str, int],
        frees: Mapping[tuple[str, str], int] | None = None, leaving: bool = False,
    ) -> dict[str, int]:
        """One atomic step: free ``frees`` ((owner, key) -> slots of jobs
        whose claims ended; never below 0), then take up to ``want[key]``
        for ``owner`` per key, never holding more than ``cap`` of a key in
        all. Stamps ``owner`` now, or stale if ``leaving``. Returns the
        slots granted per key of ``want``."""

    def key_slots_owners(self, queue: str) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
        """The store's clock (ms), every owner's stamp (ms last synced; 0 if
        stale) and the slots held per (owner, key)."""

    def key_slots_settle(self, queue: str, counts: Mapping[tuple[str, str], int], stale_before_ms: int) -> int:
        """Each (owner, key) of ``counts`` whose owner has not synced since
        ``stale_before_ms`` (or is unknown) now holds exactly its count;
        such owners left holding nothing are forgotten. Returns the slots
        freed (less those added)."""

    def key_slots_drop(self, queue: str) -> None:
        """Forget every per-key slot of the queue."""

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        """Idempotent enqueue, step 1: mark ``key`` as being enqueued for
        ``ttl_ms`` unless it is already known (reserved or remembered).
        True if this call took it. Atomic across processes."""

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        """Store the descriptors an enqueue with ``key`` created, for
        ``ttl_ms`` (replacing the reservation)."""

    def recall_enqueue(self, key: str) -> list[str] | None:
        """The remembered descriptors; [] while the key is only reserved;
        None if the key is unknown or expired."""

    def forget_enqueue(self, key: str) -> None:
        """Drop a reservation (the enqueue failed) or remembered key."""

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Add ``counts[queue][event]`` to the minute ``minute`` (minutes
        since the epoch). Every process adds into the same buckets."""

    def read_counts(self, since_minute: int, until_minute: int) -> Counts:
        """minute -> queue -> event -> count, for minutes in the range."""
