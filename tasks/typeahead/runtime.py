"""What the typeahead tasks keep of their own in a process, over the
process's ``TaskRuntime`` (its app-data store and HBase pair): settings, and
the index tables ensured on a cluster the first time the process uses it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair, ClusterPool
from tasks.hbase.tables import EnsuredTables
from tasks.runtime import TaskRuntime, current
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.tables import TYPEAHEAD_TALL, TYPEAHEAD_WIDE


@dataclass
class TypeaheadRuntime:
    settings: TypeaheadSettings
    store: AppData
    pair: ClusterPair
    tables: EnsuredTables = field(init=False)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)

    @classmethod
    def on(cls, shared: TaskRuntime) -> TypeaheadRuntime:
        """The typeahead tasks' view of ``shared`` (settings from its environment)."""
        return cls(TypeaheadSettings.from_env(shared.env), shared.store, shared.pair)

    def ready(self, cluster: str) -> ClusterPool:
        """``cluster``'s pool with the index tables ensured (HBaseError while
        it is down: the job is retried)."""
        return self.tables.ready(cluster, TYPEAHEAD_WIDE, TYPEAHEAD_TALL)


def runtime(shared: TaskRuntime | None = None) -> TypeaheadRuntime:
    """The typeahead tasks' view of ``shared``, by default this process's runtime."""
    return (current() if shared is None else shared).view(TypeaheadRuntime.on)
