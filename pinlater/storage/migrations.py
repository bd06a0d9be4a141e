"""``pinlater migrate``'s steps and their runner.

Each kind of store has an ordered registry ``{from_version: Step}``; its
current layout is one past the last step (``pinlater.storage.layout``).
Adding a step is a few lines: a function (or ``each_job_table`` with a
block of ``sql/layout.sql``), an entry in the kind's ``steps``, and the
same change in the statements that create new stores (``backends/sql``).
A step's SQL is frozen once released. The layout a MySQL step upgrades
from is kept frozen too, under ``tests/integration/sql``:
``tests/integration/test_migrations.py`` builds a store at each older
layout, migrates it and compares every table with a new store's.

The runner brings a store up one step at a time and records each new
version as soon as its step is done, so a crash loses at most the step
under way, which runs again (steps are idempotent) when migrate is re-run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import pymysql

from pinlater.errors import ShardConnectionFailed
from pinlater.kit.sqlblocks import is_job_table, sql
from pinlater.storage import keys
from pinlater.storage.errors import redis_guard
from pinlater.storage.layout import (
    LAYOUT_SQL,
    Kind,
    LayoutError,
    Step,
    Target,
    mysql_layout,
    redis_layout,
    write_mysql_layout,
    write_redis_layout,
)
from pinlater.storage.mysql_pool import ConnectionPool, MySQLAddress, Session, error_code
from pinlater.storage.redis_pool import open_redis

if TYPE_CHECKING:
    import redis

    from pinlater.settings import Settings

T = TypeVar("T")

# A DDL step re-run after a crash meets its own work: duplicate column
# (1060), duplicate key name (1061), can't drop what is gone (1091).
ALREADY_APPLIED = frozenset({1060, 1061, 1091})


def _record_only(_target: object) -> None:
    """Layout 1 -> 2: the change is the version record itself, which the
    runner writes after every step."""


def _redis_jobs_to_records(client: redis.Redis[bytes]) -> None:
    """Layout 2 -> 3 of a Redis shard (pinlater.backends.redis_upgrade)."""
    from pinlater.backends.redis_upgrade import upgrade_to_v3

    upgrade_to_v3(client)


def _create_meta_table(s: Session) -> None:
    s.execute(LAYOUT_SQL("meta_create"))


def _create_deleted_queues_table(s: Session) -> None:
    s.execute(LAYOUT_SQL("shard_v2_deleted_queues"))


def each_job_table(block: str, blocks: Callable[..., str] = LAYOUT_SQL) -> Callable[[Session], None]:
    """A MySQL shard step running ``block`` (of ``sql/layout.sql`` unless
    ``blocks`` says otherwise; with a ``{table}`` placeholder, e.g. an ALTER
    TABLE) on every job table, tolerating what an earlier, interrupted run
    already did."""

    def apply(s: Session) -> None:
        s.execute(sql("list_tables"))
        for name in sorted(str(row[0]) for row in s.fetchall()):
            if not is_job_table(name):
                continue
            try:
                s.execute(blocks(block, table=name))
            except pymysql.MySQLError as exc:
                if error_code(exc) not in ALREADY_APPLIED:
                    raise

    return apply


# Adding a step, e.g. an index on MySQL job tables: a block in sql/layout.sql
#     -- name: shard_v3_job_index
#     ALTER TABLE {table} ADD INDEX by_x (state, x)
# then in MYSQL_SHARD's steps
#     3: Step("index job tables by x", each_job_table("shard_v3_job_index"), compatible=True),
# the same index in create_job_table (backends/sql/mysql.sql) for new tables,
# and layout 3 frozen in tests/integration/sql for test_migrations.
REDIS_SHARD: Kind[redis.Redis[bytes]] = Kind(
    "redis shard", keys.SHARD_LAYOUT, keys.QUEUES,
    {
        1: Step("record the layout version (key pl:layout)", _record_only, compatible=True),
        # Incompatible: this code reads layout-3 jobs only, so a shard is
        # refused until migrate has converted its jobs.
        2: Step(
            "pack each job into one field of its priority's jobs hash (pl:{queue}:p{N}:jobs)",
            _redis_jobs_to_records,
            compatible=False,
        ),
        # Compatible: nothing is rewritten. Layout-3 code would read a trace
        # section as body, so the backend writes traces only on layout 4,
        # which such code refuses.
        3: Step("job records may carry their trace context (the record's flag 16)", _record_only, compatible=True),
    },
)
REDIS_CONTROL: Kind[redis.Redis[bytes]] = Kind(
    "redis control store", keys.CONTROL_LAYOUT, keys.CONTROL_QUEUES,
    {1: Step("record the layout version (key plc:layout)", _record_only, compatible=True)},
)
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
    },
)
MYSQL_CONTROL: Kind[Session] = Kind(
    "mysql control store", "control", "pinlater_queue_config",
    {1: Step("record the layout version (table pinlater_meta)", _create_meta_table, compatible=True)},
)


@dataclass(frozen=True)
class Store(Generic[Target]):
    """One store as the runner sees it."""

    where: str
    kind: Kind[Target]
    read: Callable[[bool], int]  # stamp_new -> version (0: new, unrecorded)
    write: Callable[[int], None]
    apply: Callable[[Step[Target]], None]


def upgrade(store: Store[Target], dry_run: bool, say: Callable[[str], None]) -> None:
    """Bring ``store`` to its kind's current layout, one step at a time."""
    current = store.kind.current
    stored = store.read(not dry_run)
    if stored == 0:
        say(f"{store.where}: new, would record layout {current}")
        return
    if stored > current:
        raise LayoutError(
            f"{store.where} has storage layout {stored}, newer than this PinLater knows ({current}):"
            " upgrade PinLater"
        )
    if stored == current:
        say(f"{store.where}: layout {current}, up to date")
        return
    say(f"{store.where}: layout {stored}, current {current}")
    for version in range(stored, current):
        step = store.kind.steps[version]
        if dry_run:
            say(f"{store.where}: would run step {version} -> {version + 1}: {step.description}")
            continue
        say(f"{store.where}: step {version} -> {version + 1}: {step.description}")
        store.apply(step)
        store.write(version + 1)
    if not dry_run:
        say(f"{store.where}: now at layout {current}")


def _upgrade_redis(
    kind: Kind[redis.Redis[bytes]], url: str, where: str, timeout_s: float, dry_run: bool, say: Callable[[str], None]
) -> None:
    client = open_redis(url, timeout_s)

    def guarded(fn: Callable[[], T]) -> T:
        with redis_guard(where, ShardConnectionFailed):
            return fn()

    store = Store(
        where, kind,
        read=lambda stamp: guarded(lambda: redis_layout(client, kind, stamp)),
        write=lambda version: guarded(lambda: write_redis_layout(client, kind, version)),
        apply=lambda step: guarded(lambda: step.apply(client)),
    )
    try:
        upgrade(store, dry_run, say)
    finally:
        client.close()
        client.connection_pool.disconnect()


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


def migrate(settings: Settings, dry_run: bool, say: Callable[[str], None]) -> None:
    """Every shard, then the control store; stops at the first error (a
    re-run resumes where it stopped)."""
    targets = [(spec.url, True, f"shard {spec.id}") for spec in settings.shards]
    targets.append((settings.resolved_control_url, False, "control store"))
    timeout_s = settings.socket_timeout_s
    for url, is_shard, label in targets:
        scheme = url.split("://", 1)[0]
        if scheme in ("redis", "rediss"):
            kind = REDIS_SHARD if is_shard else REDIS_CONTROL
            _upgrade_redis(kind, url, f"{label} (redis)", timeout_s, dry_run, say)
        elif scheme == "mysql":
            mkind = MYSQL_SHARD if is_shard else MYSQL_CONTROL
            _upgrade_mysql(mkind, url, f"{label} (mysql)", timeout_s, dry_run, say)
        else:
            say(f"{label} ({scheme}): kept in memory, nothing to migrate")
