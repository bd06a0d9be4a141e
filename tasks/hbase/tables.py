"""Table definitions, their creation on each cluster, and their drift.

Every table is made and altered through Thrift2, whose family descriptor
carries what Thrift1 cannot set: the data block encoding and the block size
(the feed paper's prefix encoding and 16 KB blocks), beside versions, bloom filter,
block cache, in-memory and prefetch on open. A family created with HBase's
defaults would keep one version and 64 KB unencoded blocks, so every family
states what it needs.

Two kinds of difference between a table and its definition:

- **correctness**: a family missing, or keeping other versions than defined.
  A family keeping *fewer* versions is altered by any worker that finds it
  (the writers need every version); the others stop the worker with
  ``HBaseSchemaMismatch`` until an operator fixes them.
- **tuning**: encoding, block size, bloom filter, block cache, in-memory,
  prefetch on open; and at table level the coprocessor a table is defined
  with and the attributes it reads (the feed's compaction-time trimming and
  its cap).
  A worker logs it once and works on; ``pinlater-hbase tables`` shows it and
  ``--apply`` alters it, online, data kept.

A table is created with its coprocessor when the cluster can load the class;
on a cluster that cannot (an HBase without the project's jar) it is created
without it, with a warning, and the drift says so.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pinlater.kit import apps
from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.errors import HBaseError, HBaseSchemaMismatch
from tasks.hbase.idl import THRIFT2
from tasks.hbase.pair import ClusterPair
from tasks.hbase.pool import ClusterPool

log = logging.getLogger(__name__)

ENCODINGS = ("NONE", "PREFIX", "DIFF", "FAST_DIFF", "ROW_INDEX_V1")
BLOOM_FILTERS = ("NONE", "ROW", "ROWCOL")
TUNING = ("data_block_encoding", "block_size", "bloom_filter_type", "block_cache_enabled", "in_memory",
          "prefetch_blocks_on_open")
# A family attribute the Thrift2 descriptor has no field for: set and read as a value.
PREFETCH = b"PREFETCH_BLOCKS_ON_OPEN"
# HBase's own bounds on a block size (HColumnDescriptor refuses others).
MIN_BLOCK_SIZE, MAX_BLOCK_SIZE = 1024, 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    max_versions: int = 1
    block_cache_enabled: bool = True
    bloom_filter_type: str = "ROW"
    in_memory: bool = False
    data_block_encoding: str = "FAST_DIFF"
    block_size: int = 64 * 1024
    # Read every block of a store file into the cache when the file opens (after
    # a flush, a compaction or a restart), not on the first lookups that miss.
    prefetch_blocks_on_open: bool = False

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ValueError(f"family name must be non-empty without ':', got {self.name!r}")
        if type(self.max_versions) is not int or not 1 <= self.max_versions <= ALL_VERSIONS:
            raise ValueError(f"family {self.name!r}: max_versions must be 1..{ALL_VERSIONS}, got {self.max_versions!r}")
        if self.bloom_filter_type not in BLOOM_FILTERS:
            raise ValueError(f"family {self.name!r}: bloom_filter_type must be one of {BLOOM_FILTERS}, "
                             f"got {self.bloom_filter_type!r}")
        if self.data_block_encoding not in ENCODINGS:
            raise ValueError(f"family {self.name!r}: data_block_encoding must be one of {ENCODINGS}, "
                             f"got {self.data_block_encoding!r}")
        if type(self.block_size) is not int or not MIN_BLOCK_SIZE <= self.block_size <= MAX_BLOCK_SIZE:
            raise ValueError(f"family {self.name!r}: block_size must be {MIN_BLOCK_SIZE}..{MAX_BLOCK_SIZE} bytes, "
                             f"got {self.block_size!r}")

    def settings(self) -> dict[str, Any]:
        return {
            "max_versions": self.max_versions,
            "data_block_encoding": self.data_block_encoding,
            "block_size": self.block_size,
            "bloom_filter_type": self.bloom_filter_type,
            "block_cache_enabled": self.block_cache_enabled,
            "in_memory": self.in_memory,
            "prefetch_blocks_on_open": self.prefetch_blocks_on_open,
        }


# The compaction-time trimming coprocessor (tasks/feeds/coprocessor;
# docs/feeds.md): a RegionObserver on the region servers' classpath, and the
# table attribute it reads its cap from at each compaction. A table defined
# with it is trimmed by compactions; ``compaction_cap`` and the dashboard's
# probes (``tasks.hbase.health``, ``jmx``) observe it.
FEED_TRIM_OBSERVER = "org.pinlater.feeds.FeedTrimObserver"
TRIM_CAP_ATTRIBUTE = "pinlater.trim.cap"
# A coprocessor attached by class alone (no jar path: the class path has it),
# at HBase's priority for user coprocessors.
_COPROCESSOR_KEY = re.compile(rb"coprocessor\$([0-9]+)")
_USER_PRIORITY = 1073741823


@dataclass(frozen=True, slots=True)
class TableDef:
    name: str
    families: tuple[Family, ...]
    coprocessor: str | None = None  # a RegionObserver class the table is attached to
    values: tuple[tuple[str, str], ...] = ()  # table attributes (what the coprocessor reads)
    # Row keys a new table's regions start at (sorted): spreads a new table
    # over every region server at once instead of after its first splits.
    # Only a creation takes them; region boundaries are no drift.
    splits: tuple[bytes, ...] = ()

    def family(self, name: str) -> Family:
        for family in self.families:
            if family.name == name:
                return family
        raise KeyError(f"table {self.name} has no family {name!r}")

    def with_values(self, **values: str) -> TableDef:
        """This definition with other table attributes (dotted names: pass a dict with **)."""
        merged = dict(self.values) | values
        return dataclasses.replace(self, values=tuple(sorted(merged.items())))


@dataclass(frozen=True, slots=True)
class Drift:
    """One way a table on one cluster differs from its definition.
    ``family`` and ``setting`` are None for a missing table; ``setting`` is
    None for a missing family."""

    cluster: str
    table: str
    family: str | None
    setting: str | None
    found: Any
    wanted: Any

    @property
    def tuning(self) -> bool:
        """Drift a worker works on with (a table-level setting is one)."""
        return self.setting in TUNING or (self.family is None and self.setting is not None)

    def __str__(self) -> str:
        where = f"{self.cluster} {self.table}"
        if self.family is None and self.setting is not None:
            return f"{where}: {self.setting} is {self.found}, defined {self.wanted}"
        if self.family is None:
            return f"{where}: table missing"
        if self.setting is None:
            return f"{where} family {self.family!r}: missing"
        return f"{where} family {self.family!r}: {self.setting} is {self.found}, defined {self.wanted}"


def _name(enum: Any, value: Any) -> Any:
    return enum._VALUES_TO_NAMES.get(value, value)


def _found(descriptor: Any) -> dict[str, Any]:
    """A family descriptor read back, in ``Family.settings()``'s terms."""
    return {
        "max_versions": descriptor.maxVersions,
        "data_block_encoding": _name(THRIFT2.TDataBlockEncoding, descriptor.dataBlockEncoding),
        "block_size": descriptor.blockSize,
        "bloom_filter_type": _name(THRIFT2.TBloomFilterType, descriptor.bloomnFilterType),
        "block_cache_enabled": bool(descriptor.blockCacheEnabled),
        "in_memory": bool(descriptor.inMemory),
        "prefetch_blocks_on_open": (descriptor.attributes or {}).get(PREFETCH, b"false").lower() == b"true",
    }


def _apply(family: Family, descriptor: Any) -> Any:
    """``descriptor`` with every setting of ``family`` written over it."""
    descriptor.maxVersions = family.max_versions
    descriptor.dataBlockEncoding = getattr(THRIFT2.TDataBlockEncoding, family.data_block_encoding)
    descriptor.blockSize = family.block_size
    descriptor.bloomnFilterType = getattr(THRIFT2.TBloomFilterType, family.bloom_filter_type)
    descriptor.blockCacheEnabled = family.block_cache_enabled
    descriptor.inMemory = family.in_memory
    prefetch = b"true" if family.prefetch_blocks_on_open else b"false"
    descriptor.attributes = {**(descriptor.attributes or {}), PREFETCH: prefetch}
    return descriptor


def _thrift2_table_name(pool: ClusterPool, name: str) -> Any:
    namespace, _, qualifier = pool.table_name(name).rpartition(":")
    return THRIFT2.TTableName(ns=(namespace or "default").encode(), qualifier=qualifier.encode())


@dataclass(frozen=True, slots=True)
class _Found:
    descriptor: Any  # the TTableDescriptor read back
    families: dict[str, Any]  # its family descriptors by name

    @property
    def attributes(self) -> dict[bytes, bytes]:
        return dict(self.descriptor.attributes or {})


def _read(pool: ClusterPool, table: TableDef) -> _Found | None:
    """The table's descriptor, or None if it does not exist."""
    name = _thrift2_table_name(pool, table.name)

    def work(client: Any) -> _Found | None:
        if not client.tableExists(name):
            return None
        descriptor = client.getTableDescriptor(name)
        return _Found(descriptor, {d.name.decode(): d for d in descriptor.columns or ()})

    return pool.thrift2.run(f"describe table {table.name}", work)


def coprocessors(attributes: dict[bytes, bytes]) -> dict[bytes, str]:
    """The coprocessors a table is attached to: attribute key -> class name."""
    out = {}
    for key, spec in attributes.items():
        if _COPROCESSOR_KEY.fullmatch(key):
            parts = spec.decode(errors="replace").split("|")
            out[key] = parts[1].strip() if len(parts) > 1 else spec.decode(errors="replace")
    return out


def _table_drift(pool: ClusterPool, table: TableDef, found: _Found) -> list[Drift]:
    drift = []
    attributes = found.attributes
    if table.coprocessor is not None and table.coprocessor not in coprocessors(attributes).values():
        attached = ", ".join(sorted(coprocessors(attributes).values())) or "none"
        drift.append(Drift(pool.name, table.name, None, "coprocessor", attached, table.coprocessor))
    for key, wanted in table.values:
        value = attributes.get(key.encode())
        have = "unset" if value is None else value.decode(errors="replace")
        if have != wanted:
            drift.append(Drift(pool.name, table.name, None, key, have, wanted))
    return drift


def _drift(pool: ClusterPool, table: TableDef, found: _Found | None) -> list[Drift]:
    if found is None:
        return [Drift(pool.name, table.name, None, None, "missing", "defined")]
    drift = _table_drift(pool, table, found)
    for family in table.families:
        descriptor = found.families.get(family.name)
        if descriptor is None:
            drift.append(Drift(pool.name, table.name, family.name, None, "missing", "defined"))
            continue
        actual = _found(descriptor)
        for setting, wanted in family.settings().items():
            if actual[setting] != wanted:
                drift.append(Drift(pool.name, table.name, family.name, setting, actual[setting], wanted))
    return drift


def table_drift(pool: ClusterPool, table: TableDef) -> list[Drift]:
    """How ``table`` on this cluster differs from its definition ([]: not at all)."""
    return _drift(pool, table, _read(pool, table))


def _attributes(table: TableDef, found: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    """``found`` (a table's attributes as read) with the definition's
    coprocessor attached and its values set; other attributes are kept."""
    attributes = dict(found or {})
    if table.coprocessor is not None:
        attached = coprocessors(attributes)
        if table.coprocessor not in attached.values():
            numbers = [int(m.group(1)) for k in attached if (m := _COPROCESSOR_KEY.fullmatch(k))]
            slot = b"coprocessor$%d" % (max(numbers, default=0) + 1)
            attributes[slot] = f"|{table.coprocessor}|{_USER_PRIORITY}|".encode()
    for name, value in table.values:
        attributes[name.encode()] = value.encode()
    return attributes


def compaction_cap(pool: ClusterPool, table: TableDef) -> int | None:
    """The cap ``table``'s compactions trim its rows to on this cluster: its
    attribute, when the table is attached to the trimming coprocessor and the
    attribute is a whole number the coprocessor takes; else None (the table
    is not trimmed by compactions, so the sweep trims it)."""
    found = _read(pool, table)
    if found is None or FEED_TRIM_OBSERVER not in coprocessors(found.attributes).values():
        return None
    text = found.attributes.get(TRIM_CAP_ATTRIBUTE.encode(), b"")
    # As the coprocessor reads it: ASCII digits only, at most 18 of them.
    if not (text.isdigit() and len(text) <= 18 and int(text) >= 1):
        return None
    return int(text)


def detach_coprocessor(pool: ClusterPool, table: TableDef) -> bool:
    """Take ``table``'s coprocessor off it on this cluster (its attributes
    stay); True if it was attached. The regions reopen without it."""
    found = _read(pool, table)
    if found is None or table.coprocessor is None:
        return False
    attributes = found.attributes
    keys = [key for key, name in coprocessors(attributes).items() if name == table.coprocessor]
    if not keys:
        return False
    found.descriptor.attributes = {k: v for k, v in attributes.items() if k not in keys}
    pool.thrift2.run(f"detach {table.coprocessor} from {table.name}", lambda c: c.modifyTable(found.descriptor))
    return True


def _create(pool: ClusterPool, table: TableDef) -> bool:
    """Create the table; False if another process made it meanwhile. A
    coprocessor the cluster cannot load is left out, with a warning."""
    name = _thrift2_table_name(pool, table.name)
    columns = [_apply(f, THRIFT2.TColumnFamilyDescriptor(name=f.name.encode())) for f in table.families]

    def work(attributes: dict[bytes, bytes]) -> Callable[[Any], bool]:
        def create(client: Any) -> bool:
            try:
                client.createTable(THRIFT2.TTableDescriptor(tableName=name, columns=columns, attributes=attributes),
                                   list(table.splits) or None)
            except THRIFT2.TIOError as exc:
                if "TableExistsException" in (exc.message or ""):
                    return False
                raise
            return True

        return create

    # Retried like a read: a create waits for every region to open and can
    # outlast the call's timeout yet finish; sent again, it meets the table
    # (TableExistsException), which reads as made meanwhile.
    try:
        return pool.thrift2.run(f"create table {table.name}", work(_attributes(table)))
    except HBaseError as exc:
        if table.coprocessor is None or table.coprocessor not in str(exc):
            raise
    log.warning("hbase %s: cannot load %s there; table %s created without it (see docs/feeds.md)",
                pool.name, table.coprocessor, table.name)
    bare = dataclasses.replace(table, coprocessor=None)
    return pool.thrift2.run(f"create table {table.name}", work(_attributes(bare)))


def _alter_table(pool: ClusterPool, table: TableDef, found: _Found) -> None:
    """Attach the coprocessor and set the values (the families as read; the
    regions reopen, data kept)."""
    found.descriptor.attributes = _attributes(table, found.attributes)
    pool.thrift2.run(f"alter table {table.name}", lambda c: c.modifyTable(found.descriptor))


def _alter(pool: ClusterPool, table: TableDef, family: Family, found: Any) -> None:
    """Set every setting of ``family``: added if ``found`` is None, else its
    descriptor as read, with the defined settings written over it (what the
    definition does not name, compression or TTL say, stays as it was)."""
    name = _thrift2_table_name(pool, table.name)
    if found is None:
        descriptor = _apply(family, THRIFT2.TColumnFamilyDescriptor(name=family.name.encode()))
        pool.thrift2.run(f"add family {family.name} to {table.name}", lambda c: c.addColumnFamily(name, descriptor))
    else:
        descriptor = _apply(family, found)
        pool.thrift2.run(f"alter family {family.name} of {table.name}",
                         lambda c: c.modifyColumnFamily(name, descriptor))


def apply_table(pool: ClusterPool, table: TableDef) -> list[Drift]:
    """Make ``table`` on this cluster what its definition says: create it,
    add missing families, alter drifted ones (online; data kept, though a
    family altered to keep fewer versions loses the extra ones at its next
    compaction). Returns the drift it found and fixed."""
    found = _read(pool, table)
    drift = _drift(pool, table, found)
    if found is None:
        _create(pool, table)
        return drift
    if any(d.family is None for d in drift):  # first: it sends the families as read
        _alter_table(pool, table, found)
    for family_name in dict.fromkeys(d.family for d in drift if d.family is not None):
        _alter(pool, table, table.family(family_name), found.families.get(family_name))
    return drift


_warned: set[tuple[str, str]] = set()


def ensure_table(pool: ClusterPool, table: TableDef) -> bool:
    """Create the table on this cluster if it is missing; else alter a family
    keeping fewer versions than defined, refuse (``HBaseSchemaMismatch``) a
    missing family or one keeping more versions, and log tuning drift once.
    True if it was created here."""
    found = _read(pool, table)
    if found is None and _create(pool, table):
        return True
    if found is None:  # made meanwhile by another worker
        found = _read(pool, table)
    drift = _drift(pool, table, found)
    short = [d for d in drift if d.setting == "max_versions" and d.found < d.wanted]
    for item in short:
        assert found is not None and item.family is not None
        _alter_versions(pool, table, item.family, item.wanted, found.families[item.family])
    wrong = [d for d in drift if not d.tuning and d not in short]
    if wrong:
        raise HBaseSchemaMismatch(pool.name, str(pool.thrift2.address), f"ensure table {table.name}",
                                  "; ".join(_problem(d) for d in wrong))
    tuning = [d for d in drift if d.tuning]
    if tuning and (pool.name, table.name) not in _warned:
        _warned.add((pool.name, table.name))
        log.warning("hbase %s: table %s differs from its tuning (%s); `pinlater-hbase tables --apply` alters it",
                    pool.name, table.name, "; ".join(str(d) for d in tuning))
    return False


def _problem(drift: Drift) -> str:
    if drift.setting is None:
        return f"family {drift.family!r} missing"
    if drift.setting == "max_versions":
        return f"family {drift.family!r} keeps {drift.found} versions, not {drift.wanted}"
    return str(drift)


def _alter_versions(pool: ClusterPool, table: TableDef, family: str, versions: int, descriptor: Any) -> None:
    """Only the versions of one family: a worker changes nothing else."""
    name = _thrift2_table_name(pool, table.name)
    descriptor.maxVersions = versions
    pool.thrift2.run(f"alter table {table.name} family {family} to keep {versions} versions",
                     lambda c: c.modifyColumnFamily(name, descriptor))


def ensure_tables(pair: ClusterPair, tables: Iterable[TableDef]) -> dict[str, list[str]]:
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


class UnloadableApp(ValueError):
    """An installed app whose manifest or tables cannot be loaded: its
    tables would go unchecked."""


def installed_tables() -> tuple[TableDef, ...]:
    """The tables of every installed app (its manifest's ``tables``, as
    configured), by app name."""
    found, unavailable = apps.installed()
    if unavailable:
        raise UnloadableApp("; ".join(f"app {u.name}: {u.error}" for u in unavailable))
    tables: dict[str, TableDef] = {}
    for app in found:
        for table in apps.load(app.tables)() if app.tables else ():
            if not isinstance(table, TableDef):
                raise UnloadableApp(f"app {app.name}: {app.tables} gave a {type(table).__name__}, not a TableDef")
            if table.name in tables:
                raise UnloadableApp(f"app {app.name}: table {table.name} is another app's too")
            tables[table.name] = table
    return tuple(tables.values())
