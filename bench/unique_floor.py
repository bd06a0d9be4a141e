"""The MySQL store's unique enqueue against the floor its schema sets, run
by bench/core.py beside its unique rows, in the same worker processes.

``floor_vs_plain``: the statements the store sends for a unique enqueue
(the jobs' INSERT, then ``unique_new`` for their keys, in one transaction,
one round trip), as raw SQL with no job service in between, against the
jobs' INSERT alone: the ratio the store's own ``vs_plain`` tends to as its
client work per call shrinks (that work, the same in both, makes the
store's ratio the higher one where it is large: one job a call).

``in_row_vs_plain``: the same with each key in its job's own row, a column
with a unique index, and no table of keys: what a layout that kept the key
there could reach (plain jobs then write NULL in that column).

The ids a unique row names are not checked here (under interleaved
auto-increment they may not be the job's): the cost is the same.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from bench.workloads import BODY
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.mysql.statements import sql

DATABASE = "pinlater_bench_raw"
Timed = tuple[int, float, float]

_IN_ROW_COLUMNS = ("(state, body, attempts_allowed, attempts_remaining, custom_status, created_at, run_after, "
                   "updated_at, claim, trace, ukey)")
_IN_ROW_VALUES = "(0, %s, 3, 3, '', 1, 1, 1, NULL, NULL, %s)"


def _connect() -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", database=DATABASE,
                           autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)


def prepare(kind: str) -> str:
    """A fresh job table for ``kind`` ("floor" or "in_row"), and for
    "floor" a fresh table of keys; the job table's name."""
    table = job_table(f"raw_{kind}_{uuid.uuid4().hex[:8]}", 1)
    ddl = sql("create_job_table", table=table)
    if kind == "in_row":
        with_key = ddl.replace("  PRIMARY KEY (id),", "  ukey VARBINARY(200) NULL,\n  PRIMARY KEY (id),\n"
                                                       "  UNIQUE KEY by_ukey (ukey),")
        if with_key == ddl:
            raise RuntimeError("create_job_table has no 'PRIMARY KEY (id),' line to put the key column before")
        ddl = with_key
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"USE {DATABASE}")
        cur.execute(ddl)
        if kind == "floor":
            cur.execute("DROP TABLE IF EXISTS pinlater_unique")
            cur.execute(sql("create_unique_table"))
    conn.close()
    return table


def _run(jobs: int, batch: int, text: Callable[[int], str], values: Callable[[int, int], list[Any]]) -> Timed:
    """``jobs`` jobs in calls of ``batch``: ``text(n)`` run with
    ``values(n, first)`` for the call's first job ``first``."""
    conn = _connect()
    done = 0
    started = time.time()
    with conn.cursor() as cur:
        while done < jobs:
            n = min(batch, jobs - done)
            cur.execute(text(n), values(n, done))
            while cur.nextset():
                pass
            done += n
    ended = time.time()
    conn.close()
    return done, started, ended


def _keys(n: int, first: int) -> list[bytes]:
    return [f"u{os.getpid()}-{first + i}".encode() for i in range(n)]


def _jobs_insert(table: str, n: int) -> str:
    return sql("enqueue_traced", table=table, rows=n)


def _job_values(n: int) -> list[Any]:
    return [v for _ in range(n) for v in (BODY, 3, 3, "", None, None)]


def floor_plain(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _run(jobs, batch, lambda n: _jobs_insert(table, n), lambda n, _first: _job_values(n))


def floor_unique(_: str, table: str, jobs: int, batch: int) -> Timed:
    def text(n: int) -> str:
        return ";\n".join((sql("begin"), _jobs_insert(table, n), sql("unique_new", rows=n, priority=1),
                           sql("commit")))

    def values(n: int, first: int) -> list[Any]:
        return [*_job_values(n), *(v for key in _keys(n, first) for v in ("bench", key))]

    return _run(jobs, batch, text, values)


def _in_row(table: str, jobs: int, batch: int, keyed: bool) -> Timed:
    def text(n: int) -> str:
        return f"INSERT INTO {table} {_IN_ROW_COLUMNS} VALUES " + ", ".join([_IN_ROW_VALUES] * n)

    def values(n: int, first: int) -> list[Any]:
        keys: list[bytes | None] = list(_keys(n, first)) if keyed else [None] * n
        return [v for key in keys for v in (BODY, key)]

    return _run(jobs, batch, text, values)


def in_row_plain(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _in_row(table, jobs, batch, keyed=False)


def in_row_unique(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _in_row(table, jobs, batch, keyed=True)
