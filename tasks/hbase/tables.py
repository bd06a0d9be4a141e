"""Table definitions, and their idempotent creation on each cluster.

Thrift1 can set a family's versions, block cache, bloom filter, in-memory flag
and TTL; not its data block encoding, block size or KEEP_DELETED_CELLS (see
docs/hbase.md). A family created with happybase's defaults would keep 3
versions with the block cache off, so every family here states what it needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tasks.hbase.errors import AlreadyExists, HBaseSchemaMismatch
from tasks.hbase.pair import ClusterPair
from tasks.hbase.pool import ClusterPool


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    max_versions: int = 1
    block_cache_enabled: bool = True
    bloom_filter_type: str = "ROW"  # NONE, ROW or ROWCOL
    in_memory: bool = False

    def options(self) -> dict[str, Any]:
        return {
            "max_versions": self.max_versions,
            "block_cache_enabled": self.block_cache_enabled,
            "bloom_filter_type": self.bloom_filter_type,
            "in_memory": self.in_memory,
        }


@dataclass(frozen=True, slots=True)
class TableDef:
    name: str
    families: tuple[Family, ...]

    def family(self, name: str) -> Family:
        for family in self.families:
            if family.name == name:
                return family
        raise KeyError(f"table {self.name} has no family {name!r}")


# The following feed (seed 002): one row per user, wide: family "feed", one
# column per pin, qualifier = reverse creation time + pin id, empty value;
# cell timestamps are the time of the action that wrote them.
FOLLOWING_FEED = TableDef("following_feed", (Family("feed", max_versions=1, block_cache_enabled=True),))

# The typeahead's contacts index (seed 003; layout in tasks/typeahead/entries.py):
# wide rows per (user, source) with token columns "c" and member records "m",
# and tall rows per (user, source, token, contact) for huge sources.
TYPEAHEAD_WIDE = TableDef("typeahead_wide", (Family("c"), Family("m")))
TYPEAHEAD_TALL = TableDef("typeahead_tall", (Family("c"),))

TABLES = (FOLLOWING_FEED, TYPEAHEAD_WIDE, TYPEAHEAD_TALL)


def _check(pool: ClusterPool, table: TableDef, found: dict[bytes, dict[str, Any]]) -> None:
    for family in table.families:
        actual = found.get(family.name.encode())
        if actual is None:
            problem = f"family {family.name!r} missing (has {sorted(k.decode() for k in found)})"
        elif actual["max_versions"] != family.max_versions:
            problem = f"family {family.name!r} keeps {actual['max_versions']} versions, not {family.max_versions}"
        elif bool(actual["block_cache_enabled"]) != family.block_cache_enabled:
            problem = f"family {family.name!r} has block cache {'on' if actual['block_cache_enabled'] else 'off'}"
        else:
            continue
        raise HBaseSchemaMismatch(pool.name, str(pool.address), f"ensure table {table.name}", problem)


def ensure_table(pool: ClusterPool, table: TableDef) -> bool:
    """Create the table on this cluster if it is missing, else check its
    families. True if it was created here."""

    def work(connection: Any) -> bool:
        created = False
        if table.name.encode() not in connection.tables():
            try:
                connection.create_table(table.name, {f.name: f.options() for f in table.families})
                created = True
            except AlreadyExists:  # made meanwhile by another worker
                pass
        _check(pool, table, connection.table(table.name).families())
        return created

    return pool.run(f"ensure table {table.name}", work)


def ensure_tables(pair: ClusterPair, tables: Iterable[TableDef] = TABLES) -> dict[str, list[str]]:
    """Ensure every table on both clusters; returns the tables created, by cluster."""
    created: dict[str, list[str]] = {}
    for pool in pair:
        created[pool.name] = [table.name for table in tables if ensure_table(pool, table)]
    return created


def drop_table(pool: ClusterPool, name: str) -> bool:
    """Disable and delete a table if it exists (tests, tooling). True if dropped."""

    def work(connection: Any) -> bool:
        if name.encode() not in connection.tables():
            return False
        connection.delete_table(name, disable=True)
        return True

    return pool.run(f"drop table {name}", work)


class EnsuredTables:
    """Tables ensured once per process and cluster, on first use: a worker
    starts while a cluster is down, and its jobs for the other cluster run."""

    def __init__(self, pair: ClusterPair) -> None:
        self.pair = pair
        self._done: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def ready(self, cluster: str, *tables: TableDef) -> ClusterPool:
        """``cluster``'s pool with ``tables`` there (raises ``HBaseError``
        while it is down: the job is retried)."""
        missing = [t for t in tables if (cluster, t.name) not in self._done]
        if missing:
            with self._lock:
                for table in missing:
                    if (cluster, table.name) not in self._done:
                        ensure_table(self.pair[cluster], table)
                        self._done.add((cluster, table.name))
        return self.pair[cluster]
