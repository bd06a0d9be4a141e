"""What the backfill tasks of one process share: a ``BackfillContext``
(app data, clusters) and the run records, made on first use and again
after a fork (a pool process must not share its parent's sockets)."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.appdata.store import AppData
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.records import Records
from tasks.hbase import ClusterPair
from tasks.per_process import PerProcess


@dataclass
class BackfillRuntime:
    ctx: BackfillContext
    records: Records

    @classmethod
    def from_env(cls) -> BackfillRuntime:
        store = AppData.from_env()
        return cls(BackfillContext(store, ClusterPair.from_settings()), Records(store))


_runtime: PerProcess[BackfillRuntime] = PerProcess(BackfillRuntime.from_env)


def runtime() -> BackfillRuntime:
    """This process's runtime (from the environment)."""
    return _runtime.get()
