"""The MySQL kind's layout: where a store records its version (a row of
``pinlater_meta``: ``shard`` or ``control``), the check made on open, and
the migration steps of each (``pinlater.stores.migrations`` runs them).

A step's SQL (``sql/layout.sql``) is frozen once released. The layout a
step upgrades from is kept frozen too, under ``tests/integration/sql``:
``tests/integration/test_migrations.py`` builds a store at each older
layout, migrates it and compares every table with a new store's.
"""

from __future__ import annotations

from collections.abc import Callable

import pymysql

from pinlater.errors import ShardConnectionFailed
from pinlater.kit.sqlblocks import is_job_table, job_table_parts
from pinlater.stores.layout import Kind, Step, Target, accept
from pinlater.stores.migrations import Store, upgrade
from pinlater.stores.mysql.errors import error_code
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session
from pinlater.stores.mysql.statements import LAYOUT_SQL, sql

# A DDL step re-run after a crash meets its own work: duplicate column
# (1060), duplicate key name (1061), can't drop what is gone (1091).
ALREADY_APPLIED = frozenset({1060, 1061, 1091})


def _recorded(s: Session, kind: Kind[Target]) -> int | None:
    if not s.scalar(LAYOUT_SQL("table_exists"), {"name": "pinlater_meta"}):
        return None
    s.execute(LAYOUT_SQL("meta_read"), {"name": kind.record})
    rows = s.fetchall()
    return int(rows[0][0]) if rows else None


def mysql_layout(s: Session, kind: Kind[Target], stamp_new: bool) -> int:
    """The store's layout (0: new and, without ``stamp_new``, unrecorded)."""
    recorded = _recorded(s, kind)
    if recorded is not None:
        return recorded
    if s.scalar(LAYOUT_SQL("table_exists"), {"name": kind.marker}):
        # A new store's first opener records its layout before it makes the
        # marker: one met between our two reads is no layout-1 store.
        recorded = _recorded(s, kind)
        return 1 if recorded is None else recorded
    if not stamp_new:
        return 0
    s.execute(LAYOUT_SQL("meta_create"))
    s.execute(LAYOUT_SQL("meta_stamp"), {"name": kind.record, "version": kind.current})
    s.execute(LAYOUT_SQL("meta_read"), {"name": kind.record})
    return int(s.fetchone()[0])


def write_mysql_layout(s: Session, kind: Kind[Target], version: int) -> None:
    s.execute(LAYOUT_SQL("meta_write"), {"name": kind.record, "version": version})


def check_mysql_layout(s: Session, kind: Kind[Target], where: str) -> int:
    """The MySQL counterpart, run by a pool's ``prepare`` before it makes
    the store's tables (so that a new store is told apart from an old one)."""
    stored = mysql_layout(s, kind, stamp_new=True)
    accept(kind, stored, where)
    return stored


def _create_meta_table(s: Session) -> None:
    s.execute(LAYOUT_SQL("meta_create"))


def _create_deleted_queues_table(s: Session) -> None:
    s.execute(LAYOUT_SQL("shard_v2_deleted_queues"))


def _keys_and_lanes(s: Session) -> None:
    """Layout 4 -> 5 of a shard: the fkey column of job tables and the
    tables of fair service."""
    each_job_table("shard_v4_key_column")(s)
    for block in ("shard_v4_lanes", "shard_v4_lane_jobs", "shard_v4_fair"):
        s.execute(LAYOUT_SQL(block))


def _unique_table(s: Session) -> None:
    s.execute(LAYOUT_SQL("shard_v5_unique"))


def _unique_triggers(s: Session) -> None:
    """Layout 6 -> 7 of a shard: the ukey column of job tables, then the
    trigger that takes their keys (which needs the column)."""
    each_job_table("shard_v6_unique_column")(s)
    each_job_table("shard_v6_unique_trigger")(s)


def _keys_as_bytes(s: Session) -> None:
    """Layout 2 -> 3 of a control store: rate bucket names and idempotency
    keys as bytes, and buckets that expire, in the tables a store made on
    first use (if it did)."""
    for table, blocks in (("pinlater_rate_bucket", ("control_v2_bucket_bytes", "control_v2_bucket_expiry")),
                          ("pinlater_idempotency", ("control_v2_idempotency_bytes",))):
        if s.scalar(LAYOUT_SQL("table_exists"), {"name": table}):
            for block in blocks:
                s.execute(LAYOUT_SQL(block))


def each_job_table(block: str, blocks: Callable[..., str] = LAYOUT_SQL) -> Callable[[Session], None]:
    """A MySQL shard step running ``block`` (of ``sql/layout.sql`` unless
    ``blocks`` says otherwise; with a ``{table}`` placeholder, e.g. an ALTER
    TABLE, and ``{queue}`` and ``{priority}`` if it needs them) on every job
    table, tolerating what an earlier, interrupted run already did."""

    def apply(s: Session) -> None:
        s.execute(sql("list_tables"))
        for name in sorted(str(row[0]) for row in s.fetchall()):
            if not is_job_table(name):
                continue
            queue, priority = job_table_parts(name)
            try:
                s.execute(blocks(block, table=name, queue=queue, priority=priority))
            except pymysql.MySQLError as exc:
                if error_code(exc) not in ALREADY_APPLIED:
                    raise

    return apply


# Adding a step, e.g. an index on MySQL job tables: a block in sql/layout.sql
#     -- name: shard_v3_job_index
#     ALTER TABLE {table} ADD INDEX by_x (state, x)
# then in MYSQL_SHARD's steps
#     3: Step("index job tables by x", each_job_table("shard_v3_job_index"), compatible=True),
# the same index in create_job_table (sql/mysql.sql) for new tables,
# and layout 3 frozen in tests/integration/sql for test_migrations.
MYSQL_SHARD: Kind[Session] = Kind(
    "mysql shard", "shard", "queues",
    {
        1: Step("record the layout version (table pinlater_meta)", _create_meta_table, compatible=True),
        # Compatible: the backend makes this table when it opens a shard.
        2: Step(
            "make the deleted_queues table (queues deleted on this shard)",
            _create_deleted_queues_table,
            compatible=True,
        ),
        # Compatible: the backend stores traces only once the column is there.
        3: Step("add the trace column to job tables", each_job_table("shard_v3_trace_column"), compatible=True),
        # Compatible: the backend stores keys only once the column is there
        # (before it, a keyed job is stored without its key).
        4: Step(
            "add the fkey column (fairness keys) to job tables, and the lanes tables of fair service",
            _keys_and_lanes, compatible=True,
        ),
        # Compatible: the backend makes this table when it opens a shard.
        5: Step("make the pinlater_unique table (unique keys)", _unique_table, compatible=True),
        # Compatible: the backend takes keys by the trigger only once the
        # store is at layout 7, and job tables made before then by older code
        # (no ukey column) keep the two-statement way.
        6: Step(
            "add the ukey column (unique keys) to job tables, and the trigger that takes them",
            _unique_triggers, compatible=True,
        ),
    },
)
MYSQL_CONTROL: Kind[Session] = Kind(
    "mysql control store", "control", "pinlater_queue_config",
    {
        1: Step("record the layout version (table pinlater_meta)", _create_meta_table, compatible=True),
        # Compatible: at layout 2 the store keeps treating names that differ
        # only in trailing spaces as one, as it always has.
        2: Step("compare rate bucket names and idempotency keys as bytes (trailing spaces count), and drop "
                "idle rate buckets", _keys_as_bytes, compatible=True),
    },
)


def migrate(url: str, is_shard: bool, where: str, timeout_s: float, dry_run: bool, say: Callable[[str], None]) -> None:
    """Bring the MySQL store at ``url`` up to the current layout."""
    _upgrade_mysql(MYSQL_SHARD if is_shard else MYSQL_CONTROL, url, where, timeout_s, dry_run, say)


def _upgrade_mysql(
    kind: Kind[Session], url: str, where: str, timeout_s: float, dry_run: bool, say: Callable[[str], None]
) -> None:
    pool = ConnectionPool(
        MySQLAddress.parse(url),
        socket_timeout_s=timeout_s,
        prepare=lambda s: None,  # migrate makes no tables beyond its steps'
        unavailable=lambda exc: ShardConnectionFailed(f"{where} unavailable: {exc}"),
        max_idle=1,
    )
    store = Store(
        where, kind,
        read=lambda stamp: pool.run(lambda s: mysql_layout(s, kind, stamp)),
        write=lambda version: pool.run(lambda s: write_mysql_layout(s, kind, version)),
        apply=lambda step: pool.run(step.apply),
    )
    try:
        upgrade(store, dry_run, say)
    finally:
        pool.close()
