"""The tiny app's HBase table."""

from __future__ import annotations

from tasks.hbase.tables import Family, TableDef

NOTES = TableDef("tinyapp_notes", (Family("n", data_block_encoding="PREFIX"),))


def defined_tables() -> tuple[TableDef, ...]:
    return (NOTES,)
