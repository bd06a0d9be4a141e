"""What the feed tasks of one process share: settings, the app-data store
and the HBase pair, made on first use and again after a fork (a pool
process must not share its parent's sockets). The feed table is ensured on
a cluster the first time the process uses that cluster, so a worker starts
while a cluster is down and its jobs for the other cluster still run."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.appdata.store import AppData
from tasks.feeds.settings import FeedSettings
from tasks.hbase import FOLLOWING_FEED, ClusterPair
from tasks.hbase.tables import EnsuredTables
from tasks.per_process import PerProcess


@dataclass
class FeedRuntime:
    settings: FeedSettings
    store: AppData
    pair: ClusterPair
    tables: EnsuredTables = field(init=False)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)

    @classmethod
    def from_env(cls) -> FeedRuntime:
        return cls(FeedSettings.from_env(), AppData.from_env(), ClusterPair.from_settings())

    def ready(self, cluster: str) -> ClusterPair:
        """The pair, with the feed table ensured on ``cluster`` (raises
        ``HBaseError`` while it is down: the job is retried)."""
        self.tables.ready(cluster, FOLLOWING_FEED)
        return self.pair

    def close(self) -> None:
        self.store.close()
        self.pair.close()


_runtime: PerProcess[FeedRuntime] = PerProcess(FeedRuntime.from_env)


def runtime() -> FeedRuntime:
    """This process's runtime (from the environment)."""
    return _runtime.get()
