"""HBase access for the feed tasks: the primary/standby cluster pair,
connection pools with timeouts, table definitions, timestamped batch writes
and deletes, and paged wide-row reads. Talks Thrift1 through happybase to the
clusters ``scripts/services up`` starts (see docs/hbase.md)."""

from tasks.hbase.errors import HBaseError, HBaseRequestFailed, HBaseSchemaMismatch, HBaseUnavailable
from tasks.hbase.pair import PRIMARY, STANDBY, ClusterPair
from tasks.hbase.pool import ClusterPool
from tasks.hbase.reads import read_columns
from tasks.hbase.settings import Address, HBaseSettings
from tasks.hbase.tables import (
    FOLLOWING_FEED,
    TABLES,
    TYPEAHEAD_TALL,
    TYPEAHEAD_WIDE,
    Family,
    TableDef,
    drop_table,
    ensure_table,
    ensure_tables,
)
from tasks.hbase.thrift2 import Thrift2Pool
from tasks.hbase.writes import delete_cells, put_cells

__all__ = [
    "FOLLOWING_FEED",
    "PRIMARY",
    "STANDBY",
    "TABLES",
    "TYPEAHEAD_TALL",
    "TYPEAHEAD_WIDE",
    "Address",
    "ClusterPair",
    "ClusterPool",
    "Family",
    "HBaseError",
    "HBaseRequestFailed",
    "HBaseSchemaMismatch",
    "HBaseSettings",
    "HBaseUnavailable",
    "TableDef",
    "Thrift2Pool",
    "delete_cells",
    "drop_table",
    "ensure_table",
    "ensure_tables",
    "put_cells",
    "read_columns",
]
