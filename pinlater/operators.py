"""The operators' API: the reads and maintenance steps that the monitor,
the dashboard, the CLI and the demos use, over the same parts as the client
API (``pinlater.engine.core.Core``), so that nothing outside reaches into the
shards or the control store."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from pinlater.engine import counters
from pinlater.engine.core import Core
from pinlater.engine.shards import ShardHealth
from pinlater.models import JobInfo
from pinlater.observe.seam import Snapshot
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState
from pinlater.stores.base import ExpiredClaims


class Operators:
    def __init__(self, core: Core) -> None:
        self.core = core

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
        return self.core.inspector.shard_now_ms(shard_id or self.core.shards.ids[0])

    def store_metrics(self) -> str:
        """This process's store calls, errors and latency, as Prometheus text."""
        return self.core.shards.seam.metrics.prometheus()

    def store_metrics_snapshot(self) -> Snapshot:
        """The same as data (``pinlater.observe.seam.merge_snapshots`` sums several)."""
        return self.core.shards.seam.metrics.snapshot()

    # -- queues -------------------------------------------------------------------------
    def queue_names(self) -> set[str]:
        """Every queue's name."""
        return self.core.admin.queue_names()

    def queue_configs(self, names: Iterable[str] | None = None) -> dict[str, QueueConfig]:
        """Every queue's config (or those of ``names`` that exist), read now; a damaged one is left out."""
        return self.core.admin.queue_configs(names)

    def queue_config_texts(self) -> dict[str, str | bytes]:
        """Every queue's stored config text, damaged ones included."""
        return self.core.admin.queue_config_texts()

    def count_by_shard(self, queue: str) -> dict[str, dict[str, int]]:
        """Per healthy shard: the queue's jobs by state (pending split into now and future)."""
        return self.core.inspector.count_by_shard(queue)

    def count_on_shard(
        self, shard_id: str, queue: str, priority: int, state: JobState | str | int, future: bool = False
    ) -> int:
        """Jobs in ``state`` of one (queue, priority) on one shard."""
        return self.core.inspector.count_on_shard(shard_id, queue, priority, state, future)

    def oldest_pending(self, shard_id: str, queue: str, priority: int) -> JobInfo | None:
        """The oldest runnable pending job of one (queue, priority) on one shard, without its body."""
        return self.core.inspector.oldest_pending(shard_id, queue, priority)

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

    def flush_counters(self) -> None:
        """This process's counted events, written to the control store now."""
        self.core.counters.flush()

    # -- the monitor's steps ------------------------------------------------------------
    def expire_claims(self, shard_id: str, config: QueueConfig, priority: int, limit: int) -> ExpiredClaims:
        """Up to ``limit`` timed-out claims on one shard re-pended or failed."""
        return self.core.admin.expire_claims(shard_id, config, priority, limit)

    def collect_finished(self, shard_id: str, config: QueueConfig, priority: int, state: JobState, limit: int) -> int:
        """Deletes up to ``limit`` finished jobs past their retention on one shard."""
        return self.core.admin.collect_finished(shard_id, config, priority, state, limit)
