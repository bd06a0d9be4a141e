"""What the typeahead tasks of one process share: settings, the app-data
store and the HBase pair, made on first use and again after a fork; the
index tables are ensured on a cluster the first time the process uses it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.appdata.store import AppData
from tasks.hbase import TYPEAHEAD_TALL, TYPEAHEAD_WIDE, ClusterPair, ClusterPool
from tasks.hbase.tables import EnsuredTables
from tasks.per_process import PerProcess
from tasks.typeahead.settings import TypeaheadSettings


@dataclass
class TypeaheadRuntime:
    settings: TypeaheadSettings
    store: AppData
    pair: ClusterPair
    tables: EnsuredTables = field(init=False)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)

    @classmethod
    def from_env(cls) -> TypeaheadRuntime:
        return cls(TypeaheadSettings.from_env(), AppData.from_env(), ClusterPair.from_settings())

    def ready(self, cluster: str) -> ClusterPool:
        """``cluster``'s pool with the index tables ensured (HBaseError while
        it is down: the job is retried)."""
        return self.tables.ready(cluster, TYPEAHEAD_WIDE, TYPEAHEAD_TALL)


_runtime: PerProcess[TypeaheadRuntime] = PerProcess(TypeaheadRuntime.from_env)


def runtime() -> TypeaheadRuntime:
    """This process's runtime (from the environment)."""
    return _runtime.get()
