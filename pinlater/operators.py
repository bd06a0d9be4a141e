"""The operators' API: the reads and maintenance steps that the monitor,
the dashboard, the CLI and the demos use beside the client API, over the
same parts (``pinlater.engine.core.Core``), so that nothing outside
reaches into the shards or the control store. What the client API offers
too (queue names, counts, scans) is on the service only.

The monitor (``Monitor``) runs the operators' steps: claim timeouts,
garbage collection, per-run stats. Every step is one guarded, atomic
operation on a shard (a Lua script or a guarded SQL statement), so several
monitors may run at once: a job is expired or collected by exactly one of
them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from pinlater.engine import counters
from pinlater.engine.batches import SettleWalk, drop_old_batches, settle_batches, status_of
from pinlater.engine.core import Core
from pinlater.engine.counters import DEQUEUED, ENQUEUED, EVENTS, FAILED, SUCCEEDED, current_minute
from pinlater.engine.reads import count_on, to_info
from pinlater.engine.shards import ShardHealth
from pinlater.engine.slots import Reconciled
from pinlater.errors import ConfigUnreadable, InvalidRequest, PinLaterError, QueueNotFound
from pinlater.limits import MAX_PRIORITIES
from pinlater.models import BatchStatus, JobInfo
from pinlater.observe.metrics import prometheus_text
from pinlater.observe.seam import Snapshot, job_store_families
from pinlater.queue_config import QueueConfig, validate_queue_name
from pinlater.states import JobState
from pinlater.stores.base import ExpiredClaims, ShardBackend, ShardUnavailable
from pinlater.stores.control import CANCELLED, COMPLETE, OPEN, RELEASED, SEALED

log = logging.getLogger(__name__)

# What the operators' reads speak of: shard health, and the events counted.
__all__ = [
    "DEQUEUED", "ENQUEUED", "EVENTS", "FAILED", "SUCCEEDED", "Monitor", "MonitorStats", "Operators", "ShardHealth",
    "Unregistered", "current_minute",
]


# A live batch is settled by the monitor once unchanged this long (the ACKs
# tell it sooner); a released or cancelled one is forgotten after this long.
BATCH_IDLE_MS = 1_000
BATCH_RETENTION_MS = 7 * 86_400_000


@dataclass(frozen=True, slots=True)
class Unregistered:
    """A queue with storage on shards but no config (``Operators.unregistered_queues``)."""

    priorities: int  # the most any shard has storage for
    shards: tuple[str, ...]


class Operators:
    def __init__(self, core: Core) -> None:
        self.core = core
        # Read as their owners have them: named here, not declared again.
        self.queue_config_texts: Callable[[], dict[str, str | bytes]] = core.control.queue_config_texts
        """Every queue's stored config text, damaged ones included."""
        self.store_metrics_snapshot: Callable[[], Snapshot] = core.shards.seam.metrics.snapshot
        """This process's store calls as data (``pinlater.observe.seam.merge_snapshots`` sums several)."""
        self.flush_counters: Callable[[], None] = core.counters.flush
        """This process's counted events, written to the control store now."""
        self._settle_walk = SettleWalk()  # where settle_batches goes on

    # -- shards -------------------------------------------------------------------------
    def shard_ids(self) -> list[str]:
        """Every shard's id, in configuration order."""
        return self.core.shards.ids

    def shard_status(self, *, probe: bool = False) -> dict[str, ShardHealth]:
        """Each shard's health as the prober sees it (after pinging every shard now, with ``probe``)."""
        if probe:
            self.core.shards.probe_once()
        return self.core.shards.status()

    def shard_now_ms(self, shard_id: str | None = None) -> int:
        """A shard's own clock, the one its jobs' times are on (default: the first shard's)."""
        backend = self._one_shard(shard_id or self.core.shards.ids[0])
        return self.core.shards.call(backend, "now_ms", None, lambda b: b.now_ms())

    def store_metrics(self) -> str:
        """This process's store calls, errors and latency, as Prometheus text."""
        return prometheus_text(job_store_families(self.store_metrics_snapshot()))

    # -- queues -------------------------------------------------------------------------
    def queue_configs(self, names: Iterable[str] | None = None) -> dict[str, QueueConfig]:
        """Every queue's config (or those of ``names`` that exist), read now;
        a damaged one is left out, logged."""
        control = self.core.control
        if names is None:
            return control.list_queues()
        # One read per name: a monitor of a few queues need not parse every config.
        configs: dict[str, QueueConfig] = {}
        for name in names:
            try:
                config = control.get_queue(name)
            except ConfigUnreadable as exc:
                log.error("%s", exc.message)
                continue
            if config is not None:
                configs[name] = config
        return configs

    def unregistered_queues(self) -> dict[str, Unregistered]:
        """Queues that have storage on a healthy shard but no config in the
        control store: a ``delete_queue`` cut short (run it again), or a
        control store that lost its data (``restore_queues``). Every call
        on such a queue fails with QUEUE_NOT_FOUND, and the monitor tends
        none of its jobs."""
        known = set(self.core.control.queue_config_texts())
        held = {backend.shard_id: self.queue_names_on(backend.shard_id) for backend in self.core.shards.healthy()}
        return self.unregistered_among(held, known)

    def queue_names_on(self, shard_id: str) -> set[str]:
        """The queues with storage on one shard."""
        return self.core.shards.call(self._one_shard(shard_id), "queue_names", None, lambda b: b.queue_names())

    def unregistered_among(
        self, held: Mapping[str, Collection[str]], known: Collection[str]
    ) -> dict[str, Unregistered]:
        """Of the queues each shard holds (shard -> names), those not in
        ``known`` (the control store's), by name, with the priorities
        their storage has: read only from a shard that holds such a queue."""
        found: dict[str, Unregistered] = {}
        for shard_id, names in held.items():
            lost = sorted(set(names) - set(known))
            if not lost:
                continue
            stored = self.core.shards.call(self._one_shard(shard_id), "stored_queues", None,
                                           lambda b: b.stored_queues())
            for name in lost:
                priorities = stored.get(name)
                if priorities is None:  # deleted meanwhile
                    continue
                seen = found.get(name)
                found[name] = Unregistered(max(priorities, seen.priorities) if seen else priorities,
                                           (*seen.shards, shard_id) if seen else (shard_id,))
        return found

    def restore_queues(self, names: Collection[str], *, paused: bool) -> dict[str, QueueConfig]:
        """Gives each of ``names`` (unregistered queues) a config again, with
        the default settings and as many priorities as its storage has, so
        its jobs run again; ``paused``: stored paused, for an operator to
        set its rate, caps and retry policy before resuming it. A queue
        that has a config meanwhile keeps it. What each one has now."""
        unregistered = self.unregistered_queues()
        unknown = sorted(set(names) - set(unregistered))
        if unknown:
            raise InvalidRequest(f"not unregistered (no storage on a healthy shard, or a config already): {unknown}")
        restored: dict[str, QueueConfig] = {}
        for name in sorted(names):
            config = QueueConfig(name=name, priorities=unregistered[name].priorities, paused=paused)
            if not self.core.control.create_queue(config):
                config = self.core.control.get_queue(name) or config
            else:
                log.warning("queue %s registered again with the default settings%s (storage on shards %s)",
                            name, ", paused" if paused else "", ", ".join(unregistered[name].shards))
            self.core.configs.forget(name)
            restored[name] = config
        return restored

    def count_by_shard(self, queue: str) -> dict[str, dict[str, int]]:
        """Per healthy shard: the queue's jobs by state (pending split into
        now and future), for dashboards. A shard that is down reports nothing."""
        config = self.core.configs.get(queue)
        shards = self.core.shards
        out: dict[str, dict[str, int]] = {}
        for backend in shards.healthy():
            counts: dict[str, int] = defaultdict(int)
            try:
                for p in range(1, config.priorities + 1):
                    for state in JobState:
                        counts[state.name.lower()] += count_on(shards, backend, queue, p, state, False)
                    counts["pending_future"] += count_on(shards, backend, queue, p, JobState.PENDING, True)
            except ShardUnavailable:
                continue
            out[backend.shard_id] = dict(counts)
        return out

    # -- one shard (the dashboard's reads) ------------------------------------
    # These take no queue config (the dashboard counts queues whose stored
    # config is damaged too), so they check their input themselves: a bad
    # argument must fail here, not count against the shard's health.
    def count_on_shard(
        self, shard_id: str, queue: str, priority: int, state: JobState | str | int, future: bool = False
    ) -> int:
        """Jobs in ``state`` of one (queue, priority) on one shard."""
        backend = self._one_shard(shard_id, queue, priority)
        return count_on(self.core.shards, backend, queue, priority, JobState.parse(state), future)

    def oldest_pending(self, shard_id: str, queue: str, priority: int) -> JobInfo | None:
        """The (queue, priority)'s oldest runnable pending job on one shard,
        without its body; None when there is none."""
        # Dequeue order is oldest run_after first, so a dry-run peek of one
        # job finds it; a lookup then gives its run_after.
        backend = self._one_shard(shard_id, queue, priority)
        shards = self.core.shards
        peeked = shards.call(backend, "peek", queue, lambda b: b.peek(queue, [priority], 1).jobs)
        if not peeked:
            return None
        ids = [peeked[0].local_id]
        [record] = shards.call(backend, "lookup", queue, lambda b: b.lookup(queue, priority, ids, False))
        if record is None:  # dequeued between the two calls
            return None
        return to_info(queue, shard_id, record)

    def _one_shard(self, shard_id: str, queue: str | None = None, priority: int | None = None) -> ShardBackend:
        shards = self.core.shards
        if shard_id not in shards.ids:
            raise InvalidRequest(f"no shard {shard_id!r}: the shards are {shards.ids}")
        if queue is not None:
            validate_queue_name(queue)
        if priority is not None and (type(priority) is not int or not 1 <= priority <= MAX_PRIORITIES):
            raise InvalidRequest(f"priority must be an integer from 1 to {MAX_PRIORITIES}, got {priority!r}")
        return shards.get(shard_id)

    # -- event rates --------------------------------------------------------------------
    def recent_rates(self, minutes: int = 5) -> dict[str, dict[str, float]]:
        """queue -> event -> events per second over the last ``minutes`` minutes and the current one."""
        return counters.recent_rates(self.core.control, minutes)

    def recent_totals(self, minutes: int = 60) -> dict[str, dict[str, int]]:
        """queue -> event -> events counted in the last ``minutes`` minutes."""
        return counters.recent_totals(self.core.control, minutes)

    def minute_series(
        self, queues: Collection[str] | None = None, minutes: int = 60, now: float | None = None
    ) -> dict[str, dict[str, list[int]]]:
        """queue -> event -> events in each of the last ``minutes`` minutes, oldest first."""
        return counters.minute_series(self.core.control, queues, minutes, now)

    # -- the monitor's steps ------------------------------------------------------------
    def expire_claims(self, shard_id: str, config: QueueConfig, priority: int, limit: int) -> ExpiredClaims:
        """Claims older than the queue's claim timeout on one shard, up to
        ``limit``: re-pended, or failed at their last attempt."""
        return self.core.shards.call(
            self.core.shards.get(shard_id), "expire_claims", config.name,
            lambda b: b.expire_claims(config.name, priority, config.claim_timeout_ms, limit),
        )

    def reconcile_slots(self, config: QueueConfig) -> Reconciled | None:
        """A capped queue's slots made to match its running jobs
        (``pinlater.engine.slots``), after the claims have expired; None for
        a queue without a cap, which has no slots."""
        if config.max_running is None:
            return None
        return self.core.slots.reconcile(config)

    def reconcile_key_slots(self, config: QueueConfig) -> Reconciled | None:
        """The same for a queue's per-key slots (``pinlater.engine.key_slots``);
        None for a queue without a per-key cap."""
        if config.key_max_running is None:
            return None
        return self.core.key_slots.reconcile(config)

    def settle_batches(self, idle_ms: int = BATCH_IDLE_MS) -> int:
        """Batches unchanged for ``idle_ms``: their jobs' ends looked up and
        told, complete ones' callbacks released (``pinlater.engine.batches``);
        how many completed or were released."""
        return settle_batches(self.core, idle_ms, self._settle_walk)

    def recent_batches(self, limit: int = 20) -> list[BatchStatus]:
        """The batches that changed last, newest first, whatever their state."""
        self.core.batch_ends.flush()  # this process's ACKs first
        records = self.core.control.batch_list((OPEN, SEALED, COMPLETE, RELEASED, CANCELLED), limit,
                                               newest_first=True)
        return [status_of(r) for r in records]

    def drop_old_batches(self, older_than_ms: int = BATCH_RETENTION_MS) -> int:
        """Forgets released and cancelled batches unchanged for ``older_than_ms``."""
        return drop_old_batches(self.core, older_than_ms)

    def collect_finished(self, shard_id: str, config: QueueConfig, priority: int, state: JobState, limit: int) -> int:
        """Deletes up to ``limit`` jobs in terminal ``state`` older than the
        queue's retention for that state on one shard; returns how many."""
        retentions = {JobState.SUCCEEDED: config.succeeded_retention_ms, JobState.FAILED: config.failed_retention_ms}
        if state not in retentions:
            raise InvalidRequest(f"only finished jobs are collected, not {state.name}")
        retention_ms = retentions[state]
        return self.core.shards.call(
            self.core.shards.get(shard_id), "gc", config.name,
            lambda b: b.gc(config.name, priority, state, retention_ms, limit),
        )


# An unregistered queue is logged again this often while it stays so.
UNREGISTERED_LOG_INTERVAL_S = 600.0

# Work per (shard, queue, priority) step; a pass repeats a step until it
# comes back short, so a backlog drains within one pass.
BATCH = 1000
MAX_BATCHES_PER_STEP = 100


@dataclass(slots=True)
class MonitorStats:
    claims_repended: int = 0
    claims_failed: int = 0
    succeeded_collected: int = 0
    failed_collected: int = 0
    slots_freed: int = 0
    slots_added: int = 0
    batches_settled: int = 0
    unregistered_queues: list[str] = field(default_factory=list)
    shards_skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "claims_repended": self.claims_repended,
            "claims_failed": self.claims_failed,
            "succeeded_collected": self.succeeded_collected,
            "failed_collected": self.failed_collected,
            "slots_freed": self.slots_freed,
            "slots_added": self.slots_added,
            "batches_settled": self.batches_settled,
            "unregistered_queues": list(self.unregistered_queues),
            "shards_skipped": list(self.shards_skipped),
            "errors": list(self.errors),
        }


class Monitor:
    def __init__(
        self, operators: Operators, interval_s: float = 5.0, queues: list[str] | None = None
    ) -> None:
        """``queues`` limits the monitor to those queues (default: all)."""
        self.operators = operators
        self.interval_s = interval_s
        self.queues = queues
        self._stop = threading.Event()
        self._unregistered: set[str] = set()  # found so in the last pass
        self._said: dict[str, float] = {}  # when each was last logged

    def run_once(self) -> MonitorStats:
        stats = MonitorStats()
        configs = self.operators.queue_configs(self.queues)
        for shard_id, health in self.operators.shard_status().items():
            if not health.healthy:
                stats.shards_skipped.append(shard_id)
                continue
            try:
                for config in configs.values():
                    try:
                        for p in range(1, config.priorities + 1):
                            self._expire(shard_id, config, p, stats)
                            stats.succeeded_collected += self._gc(shard_id, config, p, JobState.SUCCEEDED)
                            stats.failed_collected += self._gc(shard_id, config, p, JobState.FAILED)
                    except QueueNotFound:
                        continue  # deleted since this pass read the configs: nothing left to tend
            except ShardUnavailable as exc:
                stats.shards_skipped.append(shard_id)
                stats.errors.append(f"shard {shard_id}: {exc}")
        for config in configs.values():
            self._reconcile(config, stats)
        try:
            stats.batches_settled = self.operators.settle_batches()
            self.operators.drop_old_batches()
        except PinLaterError as exc:
            stats.errors.append(f"batches: {exc}")
        self._check_registered(stats)
        log.info("monitor pass: %s", stats.as_dict())
        return stats

    def _check_registered(self, stats: MonitorStats) -> None:
        """Jobs on shards whose queue has no config are tended by no one and
        reached by no call: said loudly, once a queue is found so in two
        passes in a row (a delete in progress is so for the one)."""
        try:
            found = self.operators.unregistered_queues()
        except PinLaterError as exc:
            stats.errors.append(f"unregistered queues: {exc}")
            return
        if self.queues is not None:
            found = {name: u for name, u in found.items() if name in self.queues}
        stats.unregistered_queues = sorted(found)
        now = time.monotonic()
        for name in sorted(set(found) & self._unregistered):
            if now - self._said.get(name, -math.inf) >= UNREGISTERED_LOG_INTERVAL_S:
                self._said[name] = now
                log.error("queue %s has storage on shards %s but no config in the control store: if it was not "
                          "deleted, the control store lost its data; `pinlater restore-queues %s` registers it "
                          "again", name, ", ".join(found[name].shards), name)
        self._unregistered = set(found)
        self._said = {name: at for name, at in self._said.items() if name in found}

    def _expire(self, shard_id: str, config: QueueConfig, priority: int, stats: MonitorStats) -> None:
        for _ in range(MAX_BATCHES_PER_STEP):
            expired = self.operators.expire_claims(shard_id, config, priority, BATCH)
            stats.claims_repended += expired.repended
            stats.claims_failed += expired.failed
            if expired.repended + expired.failed < BATCH:
                return

    def _reconcile(self, config: QueueConfig, stats: MonitorStats) -> None:
        for what, step in (("slots", self.operators.reconcile_slots),
                           ("per-key slots", self.operators.reconcile_key_slots)):
            try:
                done = step(config)
            except PinLaterError as exc:
                stats.errors.append(f"{what} of {config.name}: {exc}")
                continue
            if done is not None:
                stats.slots_freed += done.freed
                stats.slots_added += done.added

    def _gc(self, shard_id: str, config: QueueConfig, priority: int, state: JobState) -> int:
        total = 0
        for _ in range(MAX_BATCHES_PER_STEP):
            n = self.operators.collect_finished(shard_id, config, priority, state, BATCH)
            total += n
            if n < BATCH:
                break
        return total

    def run_forever(self) -> None:
        log.info("monitor running every %.1fs", self.interval_s)
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                # The monitor must outlive a bad pass (a shard restarting, a
                # control store blip): log it loudly and go on.
                log.exception("monitor pass failed")
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()

    def start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, name="pinlater-monitor", daemon=True)
        thread.start()
        return thread
