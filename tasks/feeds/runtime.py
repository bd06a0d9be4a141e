"""What the feed tasks keep of their own in a process, over the process's
``TaskRuntime`` (its app-data store and HBase pair): settings, the feed
table ensured on a cluster the first time the process uses that cluster (so
a worker starts while a cluster is down and its jobs for the other cluster
still run), whether each cluster's compactions trim the feed, and which
clusters a fan-out page writes itself (``tasks.feeds.direct``).

Whether they do (the table is attached to the trimming coprocessor) is read
from the cluster's table descriptor and kept for a minute, so an operator's
alter reaches every worker within that."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tasks.appdata.store import AppData
from tasks.feeds.direct import DirectWrites
from tasks.feeds.settings import FeedSettings
from tasks.feeds.tables import feed_table
from tasks.hbase import ClusterPair
from tasks.hbase.tables import EnsuredTables, TableDef, compaction_cap
from tasks.runtime import TaskRuntime, current

TRIM_MODE_TTL_S = 60.0


@dataclass
class FeedRuntime:
    settings: FeedSettings
    store: AppData
    pair: ClusterPair
    tables: EnsuredTables = field(init=False)
    table: TableDef = field(init=False)
    direct: DirectWrites = field(init=False)
    _trim_caps: dict[str, tuple[int | None, float]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)
        self.table = feed_table(self.settings.cap)
        self.direct = DirectWrites(self.settings.direct_write_ms / 1000)

    @classmethod
    def on(cls, shared: TaskRuntime) -> FeedRuntime:
        """The feed tasks' view of ``shared`` (settings from its environment)."""
        return cls(FeedSettings.from_env(shared.env), shared.store, shared.pair)

    def ready(self, cluster: str) -> ClusterPair:
        """The pair, with the feed table ensured on ``cluster`` (raises
        ``HBaseError`` while it is down: the job is retried)."""
        self.tables.ready(cluster, self.table)
        return self.pair

    def trimmed_by_compaction(self, cluster: str) -> bool:
        """Whether ``cluster``'s compactions trim the feed (raises
        ``HBaseError`` while it is down)."""
        cap, expires = self._trim_caps.get(cluster, (None, 0.0))
        now = time.monotonic()
        if now >= expires:
            cap = compaction_cap(self.ready(cluster)[cluster], self.table)
            self._trim_caps[cluster] = (cap, now + TRIM_MODE_TTL_S)
        return cap is not None


def runtime(shared: TaskRuntime | None = None) -> FeedRuntime:
    """The feed tasks' view of ``shared``, by default this process's runtime."""
    return (current() if shared is None else shared).view(FeedRuntime.on)
