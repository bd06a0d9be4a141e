"""The monitor: claim timeouts, garbage collection, per-run stats.

Every step is one guarded, atomic operation on a shard (a Lua script or a
guarded SQL statement), so several monitors may run at once: a job is
expired or collected by exactly one of them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from pinlater.errors import QueueNotFound
from pinlater.operators import Operators
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState
from pinlater.stores.base import ShardUnavailable

log = logging.getLogger(__name__)

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
    shards_skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "claims_repended": self.claims_repended,
            "claims_failed": self.claims_failed,
            "succeeded_collected": self.succeeded_collected,
            "failed_collected": self.failed_collected,
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
        log.info("monitor pass: %s", stats.as_dict())
        return stats

    def _expire(self, shard_id: str, config: QueueConfig, priority: int, stats: MonitorStats) -> None:
        for _ in range(MAX_BATCHES_PER_STEP):
            expired = self.operators.expire_claims(shard_id, config, priority, BATCH)
            stats.claims_repended += expired.repended
            stats.claims_failed += expired.failed
            if expired.repended + expired.failed < BATCH:
                return

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
