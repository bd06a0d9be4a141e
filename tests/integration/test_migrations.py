"""A MySQL store migrated from each older layout has the tables of a new
one: the same ``SHOW CREATE TABLE`` for every table, the same triggers,
and the same recorded layout.

Each older layout is built from its frozen DDL (``sql/layout_v1.sql`` to
``sql/layout_v6.sql``) with a queue of two priorities and a job in it, and
upgraded by ``pinlater migrate``'s runner alone: no backend opens it
before the comparison, since opening one makes missing tables and would
hide a step that forgot them. The new store is made the way a first
caller makes it, by the job service creating the same queue. Shard and
control store share one database, as with the default settings; every
database is made for one test and dropped at its end."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pinlater.kit.sqlblocks import job_table, named_blocks
from pinlater.models import Job
from pinlater.queue_config import QueueConfig
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.states import JobState
from pinlater.stores.migrations import migrate
from pinlater.stores.mysql.layout import MYSQL_CONTROL, MYSQL_SHARD
from tests.integration.mysql_support import raw_connection
from tests.servers import mysql_url

Q = "mig"
PRIORITIES = 2
V1_SQL = named_blocks("tests.integration", "sql/layout_v1.sql")
V2_SQL = named_blocks("tests.integration", "sql/layout_v2.sql")
V3_SQL = named_blocks("tests.integration", "sql/layout_v3.sql")
V4_SQL = named_blocks("tests.integration", "sql/layout_v4.sql")
V5_SQL = named_blocks("tests.integration", "sql/layout_v5.sql")
V6_SQL = named_blocks("tests.integration", "sql/layout_v6.sql")
# The next id of a table with rows: data, not layout.
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")
NEW_STORE_TABLES = {
    "queues", "deleted_queues", "pinlater_meta", *(job_table(Q, p) for p in range(1, PRIORITIES + 1)),
    "pinlater_queue_config", "pinlater_rate_bucket", "pinlater_event_counts", "pinlater_idempotency",
    "pinlater_slot_owners", "pinlater_key_slots", "pinlater_key_owners", "pinlater_lanes", "pinlater_lane_jobs",
    "pinlater_fair", "pinlater_unique", "pinlater_batches", "pinlater_batch_jobs",
}


def write_layout_1(cur: Any) -> None:
    for block in ("layout_v1_queues", "layout_v1_ctl_config_table", "layout_v1_ctl_bucket_table",
                  "layout_v1_ctl_counts_table", "layout_v1_ctl_idempotency_table"):
        cur.execute(V1_SQL(block))
    for priority in range(1, PRIORITIES + 1):
        cur.execute(V1_SQL("layout_v1_job_table", table=job_table(Q, priority)))
    cur.execute(V1_SQL("layout_v1_register_queue"), {"name": Q, "priorities": PRIORITIES})
    now = int(time.time() * 1000)
    cur.execute(V1_SQL("layout_v1_insert_job", table=job_table(Q, 1)), {
        "id": 7, "state": int(JobState.PENDING), "body": b"job", "allowed": 3, "remaining": 3, "at": now,
        "claim": None,
    })
    cur.execute(V1_SQL("layout_v1_ctl_put_config"),
                {"name": Q, "config": QueueConfig(Q, priorities=PRIORITIES).to_json()})


def write_layout_2(cur: Any) -> None:
    write_layout_1(cur)
    cur.execute(V2_SQL("layout_v2_meta"))
    for record in ("shard", "control"):
        cur.execute(V2_SQL("layout_v2_stamp"), {"name": record})


def write_layout_3(cur: Any) -> None:
    write_layout_2(cur)
    cur.execute(V3_SQL("layout_v3_deleted_queues"))
    cur.execute(V3_SQL("layout_v3_stamp"))


def write_layout_4(cur: Any) -> None:
    write_layout_3(cur)
    for priority in range(1, PRIORITIES + 1):
        cur.execute(V4_SQL("layout_v4_trace_column", table=job_table(Q, priority)))
    cur.execute(V4_SQL("layout_v4_stamp"))


def write_layout_5(cur: Any) -> None:
    write_layout_4(cur)
    for priority in range(1, PRIORITIES + 1):
        cur.execute(V5_SQL("layout_v5_key_column", table=job_table(Q, priority)))
    for block in ("layout_v5_lanes", "layout_v5_lane_jobs", "layout_v5_fair"):
        cur.execute(V5_SQL(block))
    cur.execute(V5_SQL("layout_v5_stamp"))


def write_layout_6(cur: Any) -> None:
    write_layout_5(cur)
    cur.execute(V6_SQL("layout_v6_unique"))
    cur.execute(V6_SQL("layout_v6_stamp"))


# Layout -> what builds a store (shard and control store) at it.
OLD_LAYOUTS: dict[int, Callable[[Any], None]] = {
    1: write_layout_1, 2: write_layout_2, 3: write_layout_3, 4: write_layout_4, 5: write_layout_5,
    6: write_layout_6,
}


def settings_for(database: str) -> Settings:
    url = mysql_url(database)
    return Settings(shards=parse_shards(f"s1={url}"), control_url=url)


def tables(database: str) -> dict[str, str]:
    """Table -> its ``SHOW CREATE TABLE``, without the AUTO_INCREMENT
    counter, followed by its triggers' timing, event and body."""
    conn = raw_connection(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'")
            names = sorted(str(row[0]) for row in cur.fetchall())
            found = {}
            for name in names:
                cur.execute(f"SHOW CREATE TABLE `{name}`")
                found[name] = _AUTO_INCREMENT.sub("", str(cur.fetchone()[1]))
                cur.execute("SELECT trigger_name, action_timing, event_manipulation, action_statement "
                            "FROM information_schema.triggers WHERE trigger_schema = %s AND event_object_table = %s "
                            "ORDER BY trigger_name", (database, name))
                found[name] += "".join(f"\ntrigger {' '.join(map(str, row))}" for row in cur.fetchall())
    finally:
        conn.close()
    return found


def recorded_layouts(database: str) -> dict[str, int]:
    conn = raw_connection(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT name, version FROM pinlater_meta")
            return {str(name): int(version) for name, version in cur.fetchall()}
    finally:
        conn.close()


@pytest.fixture
def new_database(servers: None) -> Iterator[Callable[[], str]]:
    """Names of databases for this test (``pinlater_mig_<hex>``), each
    dropped at its end, whoever made it."""
    made: list[str] = []

    def name() -> str:
        made.append(f"pinlater_mig_{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield name
    conn = raw_connection()
    try:
        with conn.cursor() as cur:
            for database in made:
                cur.execute(f"DROP DATABASE IF EXISTS {database}")
    finally:
        conn.close()


def old_store(database: str, layout: int) -> str:
    """``database`` made at ``layout`` from the frozen DDL."""
    conn = raw_connection()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database} CHARACTER SET utf8mb4")
    finally:
        conn.close()
    conn = raw_connection(database)
    try:
        with conn.cursor() as cur:
            OLD_LAYOUTS[layout](cur)
    finally:
        conn.close()
    return database


def test_every_older_layout_has_a_frozen_copy() -> None:
    """A new step needs the layout it upgrades from kept here."""
    assert sorted(OLD_LAYOUTS) == list(range(1, MYSQL_SHARD.current))
    assert MYSQL_CONTROL.current <= MYSQL_SHARD.current  # the control store's are among them


@pytest.mark.parametrize("layout", sorted(OLD_LAYOUTS))
def test_a_store_migrated_from_an_older_layout_has_the_tables_of_a_new_one(
    layout: int, new_database: Callable[[], str]
) -> None:
    fresh = new_database()
    with JobService.from_settings(settings_for(fresh)) as service:
        service.create_queue(Q, priorities=PRIORITIES)
    expected = tables(fresh)
    assert set(expected) == NEW_STORE_TABLES

    old = old_store(new_database(), layout)
    assert tables(old) != expected  # what the migration has to change

    said: list[str] = []
    migrate(settings_for(old), dry_run=False, say=said.append)
    assert f"shard s1 (mysql): now at layout {MYSQL_SHARD.current}" in said

    # Used once, as the fresh one was: tables a store kind makes on first
    # use (the control store's slots) need no migration step.
    with JobService.from_settings(settings_for(old)) as service:
        service.queue_names()
    migrated = tables(old)
    assert sorted(migrated) == sorted(expected)
    for name, statement in expected.items():
        assert migrated[name] == statement, f"{name} migrated from layout {layout} differs from a new one's"
    assert recorded_layouts(old) == recorded_layouts(fresh) == {
        "shard": MYSQL_SHARD.current, "control": MYSQL_CONTROL.current,
    }


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _trace_of_a_new_job(database: str) -> str | None:
    with JobService.from_settings(settings_for(database)) as service:
        service.enqueue(Q, [Job(b"traced", trace=TRACE)])
        [job] = [j for j in service.dequeue(Q, 10) if j.body == b"traced"]
        return job.trace


def test_a_layout_3_shard_keeps_working_and_stores_traces_once_migrated(new_database: Callable[[], str]) -> None:
    """Layout 4 only adds the trace column, so this code runs on a layout-3
    shard (with a warning), storing no trace until migrate has added it."""
    old = old_store(new_database(), 3)
    assert _trace_of_a_new_job(old) is None
    assert "trace" not in tables(old)[job_table(Q, 1)]
    migrate(settings_for(old), dry_run=False, say=lambda _line: None)
    assert _trace_of_a_new_job(old) == TRACE
