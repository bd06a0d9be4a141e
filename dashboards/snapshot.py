"""What the dashboard shows, read from the shards and the control store.

One snapshot is one pass over every healthy shard, the shards read in
parallel (one thread each): per queue and priority, jobs by state and the
oldest runnable pending job. The truth comes from the shards, not from
worker events, so it includes jobs no worker has touched yet. A pass is
cached for ``ttl_s`` and shared by every request, so ten open browsers (and
a Prometheus scraper) cost the shards what one does.

A shard that is out of rotation is not read: the snapshot says so
(``partial``, ``shards_down``) and shows the numbers of the others. If the
control store cannot be reached, the last known queue configs are used (a
queue made since is missing, and before any read there are none: ``partial``
says so too) and the rates are left out. A queue whose stored config cannot be read, or
holds an odd rate, is shown with ``config_error`` (see dashboards.configs)
rather than hiding every queue.

The snapshot is a JSON-ready dict (the shape of ``GET /api/overview``):

    taken_at_ms, took_ms, rate_window_minutes, partial, shards_down,
    unregistered_queues: [{name, priorities, shards}],
    control_store: {ok, error},
    totals: {state: n},
    shards: [{id, healthy, out_reason, counted, consecutive_errors, last_error,
              changed_at_ms, last_probe_at_ms, counts: {state: n} | None, error}],
    queues: [{name, priorities, max_dequeue_rate, paused, claim_timeout_ms,
              retry, config_error, counts, by_priority: {"1": counts},
              by_shard: {id: counts},
              oldest_pending: {descriptor, run_after_ms, age_ms} | None,
              rates: {event: per_s}, events: {event: n}}]

where a state is one of STATES and an event one of pinlater.operators.EVENTS.
A shard's ``out_reason`` says why it is out of rotation ("unavailable",
"refuses writes", "failing" or "same store as another shard",
``pinlater.engine.shards``), null while it is in;
``last_error`` is the error behind it.
``unregistered_queues`` are queues the counted shards hold storage for but
the control store has no config of (``pinlater restore-queues``): their
jobs are in no number, so ``partial`` is set while there are any.
When ``config_error`` is set, the config fields that could not be read are
null (and ``counts`` too when not even the priorities could be).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dashboards.configs import ConfigReader, QueueEntry
from pinlater.errors import PinLaterError
from pinlater.models import JobInfo
from pinlater.operators import EVENTS, Operators, ShardHealth, Unregistered
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState

log = logging.getLogger(__name__)

STATES = ("pending_now", "pending_future", "running", "succeeded", "failed")
# (key in STATES, backend state, future)
_READS = (
    ("pending_now", JobState.PENDING, False),
    ("pending_future", JobState.PENDING, True),
    ("running", JobState.RUNNING, False),
    ("succeeded", JobState.SUCCEEDED, False),
    ("failed", JobState.FAILED, False),
)


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(STATES, 0)


def add_counts(into: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        into[key] = into.get(key, 0) + n


@dataclass(slots=True)
class ShardReading:
    """One shard's part of a snapshot."""

    now_ms: int = 0
    # queue -> priority -> state -> jobs
    counts: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    # queue -> its oldest runnable pending job
    oldest: dict[str, JobInfo] = field(default_factory=dict)
    # every queue with storage here, configured or not
    held: set[str] = field(default_factory=set)
    error: str | None = None


def read_shard(operators: Operators, shard_id: str, configs: Sequence[QueueConfig]) -> ShardReading:
    """Counts and oldest pending jobs of every queue on one shard. The
    operators' calls go through its shard set, so that a failure here counts
    against the shard's health exactly as a worker's would."""
    reading = ShardReading()
    try:
        reading.now_ms = operators.shard_now_ms(shard_id)
        reading.held = operators.queue_names_on(shard_id)
        for config in configs:
            q = config.name
            per_priority: dict[int, dict[str, int]] = {}
            for p in range(1, config.priorities + 1):
                counts = {key: operators.count_on_shard(shard_id, q, p, s, f) for key, s, f in _READS}
                per_priority[p] = counts
                if counts["pending_now"]:
                    _note_oldest(operators, shard_id, q, p, reading)
            reading.counts[q] = per_priority
    except Exception as exc:  # noqa: BLE001 -- shown against that shard, as said below
        # The shard set has recorded it against the shard's health (a
        # connection failure takes it out of rotation at once). Show what
        # failed rather than half a shard's numbers, and keep the others.
        log.warning("dashboard could not read shard %s: %s", shard_id, exc)
        reading.counts.clear()
        reading.oldest.clear()
        reading.held.clear()
        reading.error = f"{type(exc).__name__}: {exc}"
    return reading


def _note_oldest(operators: Operators, shard_id: str, queue: str, priority: int, reading: ShardReading) -> None:
    found = operators.oldest_pending(shard_id, queue, priority)
    if found is None:
        return
    current = reading.oldest.get(queue)
    if current is None or found.run_after_ms < current.run_after_ms:
        reading.oldest[queue] = found


class Collector:
    """Builds snapshots and caches the latest one."""

    def __init__(self, operators: Operators, ttl_s: float = 2.0, rate_window_minutes: int = 5) -> None:
        self.operators = operators
        self.ttl_s = ttl_s
        self.rate_window_minutes = rate_window_minutes
        self._lock = threading.Lock()
        self._cached: dict[str, Any] | None = None
        self._cached_at = 0.0
        self._entries: dict[str, QueueEntry] = {}
        self._reader = ConfigReader(operators.queue_config_texts)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(operators.shard_ids())), thread_name_prefix="dash-shard")
        self.passes = 0
        self.failed_passes = 0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def invalidate(self) -> None:
        """After a control changed something: the next request reads afresh."""
        with self._lock:
            self._cached = None

    def snapshot(self) -> dict[str, Any]:
        # One pass at a time: concurrent requests wait for it and share it.
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached_at < self.ttl_s:
                return self._cached
            try:
                snap = self._collect()
            except Exception:
                self.failed_passes += 1
                raise
            self.passes += 1
            self._cached, self._cached_at = snap, time.monotonic()
            return snap

    # -- one pass --------------------------------------------------------------
    def _collect(self) -> dict[str, Any]:
        started = time.monotonic()
        control_error: str | None = None
        try:
            self._entries = self._reader.read()
        except PinLaterError as exc:
            control_error = f"queue configs: {exc.message}"
        queues_unread = control_error is not None
        entries = sorted(self._entries.values(), key=lambda e: e.name)
        configs = [e.config for e in entries if e.config is not None]
        rates: dict[str, dict[str, float]] = {}
        events: dict[str, dict[str, int]] = {}
        try:
            rates = self.operators.recent_rates(self.rate_window_minutes)
            events = self.operators.recent_totals(self.rate_window_minutes)
        except PinLaterError as exc:
            control_error = control_error or f"event counters: {exc.message}"

        healthy = [sid for sid, health in self.operators.shard_status().items() if health.healthy]
        futures = {sid: self._pool.submit(read_shard, self.operators, sid, configs) for sid in healthy}
        readings = {sid: f.result() for sid, f in futures.items()}
        status = self.operators.shard_status()  # after the reads, which may have changed it

        shard_views = [self._shard_view(sid, health, readings.get(sid)) for sid, health in status.items()]
        counted = {sid: r for sid, r in readings.items() if r.error is None}
        queues = [self._queue_view(e, counted, rates.get(e.name, {}), events.get(e.name, {})) for e in entries]
        totals = zero_counts()
        for q in queues:
            add_counts(totals, q["counts"] or {})
        down = [v["id"] for v in shard_views if not v["counted"]]
        # Queues whose jobs the shards hold but no config names (the control
        # store lost its data, or a delete is under way): left out of every
        # number above, so said, unless the configs themselves were not read.
        unregistered = {} if queues_unread else self._unregistered({sid: r.held for sid, r in counted.items()})
        return {
            "taken_at_ms": int(time.time() * 1000),
            "took_ms": round((time.monotonic() - started) * 1000, 1),
            "rate_window_minutes": self.rate_window_minutes,
            "partial": bool(down) or queues_unread or bool(unregistered),
            "shards_down": down,
            "unregistered_queues": [{"name": name, "priorities": u.priorities, "shards": list(u.shards)}
                                    for name, u in unregistered.items()],
            "control_store": {"ok": control_error is None, "error": control_error},
            "totals": totals,
            "shards": shard_views,
            "queues": queues,
        }

    def _unregistered(self, held: dict[str, set[str]]) -> dict[str, Unregistered]:
        try:
            return self.operators.unregistered_among(held, self._entries)
        except PinLaterError as exc:  # a shard failing since it was read: said against it next pass
            log.warning("dashboard could not read the priorities of unregistered queues: %s", exc)
            return {}

    @staticmethod
    def _shard_view(sid: str, health: ShardHealth, reading: ShardReading | None) -> dict[str, Any]:
        counts: dict[str, int] | None = None
        if reading is not None and reading.error is None:
            counts = zero_counts()
            for per_priority in reading.counts.values():
                for c in per_priority.values():
                    add_counts(counts, c)
        error = reading.error if reading is not None else None
        return {
            "id": sid,
            # As the shard set's health monitor sees it; "counted" says whether
            # this snapshot's numbers include the shard.
            "healthy": health.healthy,
            "out_reason": health.out_reason,
            "counted": counts is not None,
            "consecutive_errors": health.consecutive_errors,
            "last_error": health.last_error,
            "changed_at_ms": int(health.changed_at * 1000),
            "last_probe_at_ms": int(health.last_probe_at * 1000),
            "counts": counts,
            "error": error,
        }

    @staticmethod
    def _queue_view(
        entry: QueueEntry,
        readings: dict[str, ShardReading],
        rates: dict[str, float],
        events: dict[str, int],
    ) -> dict[str, Any]:
        config = entry.config
        common = {
            "config_error": entry.error,
            "rates": {e: _finite(round(rates.get(e, 0.0), 4)) for e in EVENTS},
            "events": {e: int(events.get(e, 0)) for e in EVENTS},
        }
        if config is None:  # not even the priorities are known: nothing to count
            return {"name": entry.name, "priorities": None, "max_dequeue_rate": None, "max_running": None,
                    "key_max_running": None, "key_rate": None, "unique_succeeded_ms": None, "paused": None,
                    "claim_timeout_ms": None, "retry": None, "counts": None, "by_priority": {}, "by_shard": {},
                    "oldest_pending": None, **common}
        counts = zero_counts()
        by_priority = {str(p): zero_counts() for p in range(1, config.priorities + 1)}
        by_shard: dict[str, dict[str, int]] = {}
        oldest: dict[str, Any] | None = None
        for sid, reading in readings.items():
            shard_counts = zero_counts()
            for p, c in reading.counts.get(config.name, {}).items():
                add_counts(by_priority[str(p)], c)
                add_counts(shard_counts, c)
            by_shard[sid] = shard_counts
            add_counts(counts, shard_counts)
            found = reading.oldest.get(config.name)
            if found is not None:
                age = max(0, reading.now_ms - found.run_after_ms)
                # Compare run_after, not ages: each shard's age is taken at its
                # own read time, so ages of different shards are not comparable.
                if oldest is None or found.run_after_ms < oldest["run_after_ms"]:
                    oldest = {"descriptor": found.descriptor, "run_after_ms": found.run_after_ms, "age_ms": age}
        stored = entry.as_stored  # else a stand-in: only its name and priorities are real
        return {
            "name": config.name,
            "priorities": config.priorities,
            # A stored NaN or Infinity limits nothing; config_error says it is odd.
            "max_dequeue_rate": _finite(config.max_dequeue_rate) if stored else None,
            "max_running": config.max_running if stored else None,
            "key_max_running": config.key_max_running if stored else None,
            "key_rate": _finite(config.key_rate) if stored else None,
            "unique_succeeded_ms": config.unique_succeeded_ms if stored else None,
            "paused": config.paused if stored else None,
            "claim_timeout_ms": config.claim_timeout_ms if stored else None,
            "retry": config.retry.kind if stored else None,
            "counts": counts,
            "by_priority": by_priority,
            "by_shard": by_shard,
            "oldest_pending": oldest,
            **common,
        }


def _finite(value: float | None) -> float | None:
    """None for NaN and the infinities, which JSON cannot carry."""
    return value if value is None or math.isfinite(value) else None
