"""Helpers shared by the MySQL integration suites."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pymysql

from pinlater.states import JobState
from pinlater.stores.base import EnqueueItem, JobRecord
from pinlater.stores.mysql.shard import MySQLBackend
from tests.servers import ensure_services


def raw_connection(database: str | None = None) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(
        host="127.0.0.1", port=13306, user="pinlater", password="pinlater",
        database=database, autocommit=True,
    )


def throwaway_database() -> Iterator[str]:
    """A fresh database name for one test module, dropped at its end
    (MariaDB started by scripts/services if it is not up)."""
    ensure_services(hbase=False)
    name = f"pinlater_test_{uuid.uuid4().hex[:10]}"
    yield name
    conn = raw_connection()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()


P, R, S, F = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED


def item(
    body: bytes = b"body", priority: int = 1, run_after: int | None = None,
    attempts: int = 3, status: str = "",
) -> EnqueueItem:
    return EnqueueItem(body, priority, run_after, attempts, status)


def one(b: MySQLBackend, q: str, **kw: Any) -> int:
    return b.enqueue(q, [item(**kw)])[0]


def rec(b: MySQLBackend, q: str, local_id: int, priority: int = 1) -> JobRecord:
    found = b.lookup(q, priority, [local_id], include_body=True)[0]
    assert found is not None
    return found


def claimed(b: MySQLBackend, q: str, source: str = "w1", **kw: Any) -> int:
    local_id = one(b, q, **kw)
    jobs = b.dequeue(q, [kw.get("priority", 1)], 10, source).jobs
    assert [j.local_id for j in jobs] == [local_id]
    return local_id
