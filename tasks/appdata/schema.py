"""Creating and dropping the shard databases: every shard has the same
tables (``tasks.appdata.tables``). Idempotent (IF NOT EXISTS), so it is safe
to run at every deploy; run it before the first write to a new shard range."""

from __future__ import annotations

from collections.abc import Iterable

from pymysql.cursors import Cursor

from tasks.appdata.sql import sql
from tasks.appdata.store import AppData
from tasks.appdata.tables import (
    ACCOUNT_IMPORTERS,
    CONTACT_SOURCES,
    EXTERNAL_ACCOUNTS,
    FOLLOW_CLOCKS,
    MAPPING_TABLES,
    OBJECT_TABLES,
)


def create_shards(store: AppData, shards: Iterable[int] | None = None) -> int:
    """Create the databases and tables of ``shards`` (all mapped ones by
    default); the number of shards."""
    done = 0
    for shard in store.shard_map.shards if shards is None else shards:

        def create(cursor: Cursor, database: str) -> None:
            cursor.execute(sql("create_database", database=database))
            for table in OBJECT_TABLES.values():
                cursor.execute(sql("create_object_table", database=database, table=table))
            for mapping in MAPPING_TABLES:
                cursor.execute(sql("create_mapping_table", database=database, table=mapping.name))
            cursor.execute(sql("create_contact_sources_table", database=database, table=CONTACT_SOURCES))
            cursor.execute(sql("create_external_accounts_table", database=database, table=EXTERNAL_ACCOUNTS))
            cursor.execute(sql("create_account_importers_table", database=database, table=ACCOUNT_IMPORTERS))
            cursor.execute(sql("create_follow_clocks_table", database=database, table=FOLLOW_CLOCKS))

        store.run(shard, create)
        done += 1
    return done


def drop_shards(store: AppData, shards: Iterable[int] | None = None) -> None:
    """Drop the shard databases (tests, and tearing down a dev setup)."""
    for shard in store.shard_map.shards if shards is None else shards:
        store.run(shard, lambda cursor, database: cursor.execute(sql("drop_database", database=database)))
