"""The primary and standby clusters, as one object.

Feed writes go to both (dual writes: one PinLater job per cluster, each
retried until it succeeds); feed reads go to the primary and, after a timeout
near its p99.9, speculatively to the standby.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tasks.hbase.pool import ClusterPool
from tasks.hbase.settings import HBaseSettings

PRIMARY = "primary"
STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class ClusterPair:
    primary: ClusterPool
    standby: ClusterPool

    @classmethod
    def from_settings(cls, settings: HBaseSettings | None = None) -> ClusterPair:
        settings = settings or HBaseSettings.from_env()
        return cls(
            primary=ClusterPool.for_cluster(PRIMARY, settings.primary, settings, settings.primary_thrift2,
                                            settings.primary_info),
            standby=ClusterPool.for_cluster(STANDBY, settings.standby, settings, settings.standby_thrift2,
                                            settings.standby_info),
        )

    def __iter__(self) -> Iterator[ClusterPool]:
        return iter((self.primary, self.standby))

    def __getitem__(self, name: str) -> ClusterPool:
        if name == PRIMARY:
            return self.primary
        if name == STANDBY:
            return self.standby
        raise KeyError(f"no HBase cluster {name!r} (primary or standby)")

    def close(self) -> None:
        for pool in self:
            pool.close()
