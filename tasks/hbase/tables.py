"""Table definitions, and their idempotent creation on each cluster.

Tables are created through Thrift1 (happybase), which can set a family's
versions, block cache, bloom filter, in-memory flag and TTL; not its data
block encoding, block size or KEEP_DELETED_CELLS (see docs/hbase.md). A family
created with happybase's defaults would keep 3 versions with the block cache
off, so every family here states what it needs.

Thrift1 cannot alter a family. A table made when a family kept fewer versions
than it now must is altered through Thrift2 (``modifyColumnFamily``): the
family's descriptor is read back whole and only its versions change.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.errors import AlreadyExists, HBaseSchemaMismatch
from tasks.hbase.idl import THRIFT2
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
# cell timestamps are the time of the action that wrote them. Its writers keep
# several versions of one column alive at once and delete single versions, so
# the family keeps every version: with VERSIONS=1 a flush drops the older
# versions a delete of the newest one should uncover.
FOLLOWING_FEED = TableDef(
    "following_feed", (Family("feed", max_versions=ALL_VERSIONS, block_cache_enabled=True),)
)

# The typeahead's contacts index (seed 003; layout in tasks/typeahead/entries.py):
# wide rows per (user, source) with token columns "c" and member records "m",
# and tall rows per (user, source, token, contact) for huge sources. Member
# records and tall token cells keep every version, for the same reason as the
# feed.
TYPEAHEAD_WIDE = TableDef("typeahead_wide", (Family("c"), Family("m", max_versions=ALL_VERSIONS)))
TYPEAHEAD_TALL = TableDef("typeahead_tall", (Family("c", max_versions=ALL_VERSIONS),))

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


def _thrift2_table_name(pool: ClusterPool, name: str) -> Any:
    namespace, _, qualifier = pool.table_name(name).rpartition(":")
    return THRIFT2.TTableName(ns=(namespace or "default").encode(), qualifier=qualifier.encode())


def keep_versions(pool: ClusterPool, table: str, family: str, versions: int) -> bool:
    """Make ``family`` of ``table`` keep at least ``versions`` versions,
    every other setting of the family as it is. True if it was altered (False:
    it keeps that many already, or has no such family)."""
    name = _thrift2_table_name(pool, table)

    def work(client: Any) -> bool:
        for descriptor in client.getTableDescriptor(name).columns or ():
            if descriptor.name != family.encode():
                continue
            if descriptor.maxVersions >= versions:
                return False  # altered meanwhile by another worker
            # The server builds the new family from this descriptor alone: it
            # must carry every setting read, with the versions changed in both
            # places they are stated.
            descriptor.maxVersions = versions
            if descriptor.attributes is not None:
                descriptor.attributes[b"VERSIONS"] = str(versions).encode()
            client.modifyColumnFamily(name, descriptor)
            return True
        return False

    return pool.thrift2.run(f"alter table {table} family {family} to keep {versions} versions", work)


def ensure_table(pool: ClusterPool, table: TableDef) -> bool:
    """Create the table on this cluster if it is missing, else check its
    families; a family keeping fewer versions than defined is altered to keep
    them. True if it was created here."""

    def work(connection: Any) -> tuple[bool, dict[bytes, dict[str, Any]]]:
        created = False
        if table.name.encode() not in connection.tables():
            try:
                connection.create_table(table.name, {f.name: f.options() for f in table.families})
                created = True
            except AlreadyExists:  # made meanwhile by another worker
                pass
        return created, connection.table(table.name).families()

    created, found = pool.run(f"ensure table {table.name}", work)
    short = [
        f for f in table.families
        if f.name.encode() in found and found[f.name.encode()]["max_versions"] < f.max_versions
    ]
    for family in short:
        keep_versions(pool, table.name, family.name, family.max_versions)
    if short:
        found = pool.run(f"ensure table {table.name}", lambda connection: connection.table(table.name).families())
    _check(pool, table, found)
    return created


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
