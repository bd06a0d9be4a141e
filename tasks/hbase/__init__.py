"""HBase access for the apps' tasks: the primary/standby cluster pair,
connection pools with timeouts, table definitions (each app defines its
own tables in its folder), batch writes and deletes
with a timestamp per cell, paged wide-row reads and versioned reads. Reads
talk Thrift1 through happybase; writes, versioned reads and table changes Thrift2, to
the clusters ``scripts/services up`` starts (see docs/hbase.md)."""

from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.errors import HBaseError, HBaseRequestFailed, HBaseSchemaMismatch, HBaseUnavailable
from tasks.hbase.pair import PRIMARY, STANDBY, ClusterPair
from tasks.hbase.pool import ClusterPool
from tasks.hbase.reads import get_versions, read_columns
from tasks.hbase.settings import Address, HBaseSettings
from tasks.hbase.tables import (
    Family,
    TableDef,
    drop_table,
    ensure_table,
    ensure_tables,
)
from tasks.hbase.thrift2 import Thrift2Pool
from tasks.hbase.writes import (
    DeleteKind,
    VersionDelete,
    VersionPut,
    delete_cells,
    delete_versions,
    put_cells,
    put_tables,
    put_versions,
)

__all__ = [
    "ALL_VERSIONS",
    "PRIMARY",
    "STANDBY",
    "Address",
    "ClusterPair",
    "ClusterPool",
    "DeleteKind",
    "Family",
    "HBaseError",
    "HBaseRequestFailed",
    "HBaseSchemaMismatch",
    "HBaseSettings",
    "HBaseUnavailable",
    "TableDef",
    "Thrift2Pool",
    "VersionDelete",
    "VersionPut",
    "delete_cells",
    "delete_versions",
    "drop_table",
    "ensure_table",
    "ensure_tables",
    "get_versions",
    "put_cells",
    "put_tables",
    "put_versions",
    "read_columns",
]
