"""The MySQL store's unique enqueue against the floor its schema sets, run
by bench/core.py beside its unique rows, in the same worker processes.

``floor_vs_plain``: the statements the store sends for a unique enqueue
(from layout 7 on: the jobs' INSERT with their keys, which the table's
trigger takes into ``pinlater_unique``, one statement), as raw SQL with
no job service in between, against the jobs' INSERT alone on the same
table: the ratio the store's own ``vs_plain`` tends to as its client work
per call shrinks.

``in_row_vs_plain``: each key in its job's own row, a column with a
unique index, and no table of keys: what a layout that kept the key only
there could reach (plain jobs then write NULL in that column). It cannot
see a key held at another priority, whose jobs are in another table.

The ids a unique row names are the jobs' own (the trigger's NEW.id).
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

_UNIQUE_COLUMNS = ("(state, body, attempts_allowed, attempts_remaining, custom_status, created_at, run_after, "
                   "updated_at, claim, trace, ukey)")
_UNIQUE_VALUES = "(0, %s, 3, 3, '', 1, 1, 1, NULL, NULL, %s)"
_QUEUE = "bench"


def _connect() -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", database=DATABASE,
                           autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)


def prepare(kind: str) -> str:
    """A fresh job table for ``kind`` ("floor" or "in_row"), as the store
    makes one: for "floor", its trigger made and a fresh table of keys;
    for "in_row", a unique index on its key column instead. The job
    table's name."""
    table = job_table(f"raw_{kind}_{uuid.uuid4().hex[:8]}", 1)
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"USE {DATABASE}")
        cur.execute(sql("create_job_table", table=table))
        if kind == "floor":
            cur.execute("DROP TABLE IF EXISTS pinlater_unique")
            cur.execute(sql("create_unique_table"))
            cur.execute(sql("unique_trigger", table=table, queue=_QUEUE, priority=1))
        cur.execute(sql("unique_armed", table=table))
        if kind == "in_row":
            cur.execute(f"ALTER TABLE {table} ADD UNIQUE KEY by_ukey (ukey)")
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


def _with_keys(table: str, jobs: int, batch: int, keyed: bool) -> Timed:
    def text(n: int) -> str:
        return f"INSERT INTO {table} {_UNIQUE_COLUMNS} VALUES " + ", ".join([_UNIQUE_VALUES] * n)

    def values(n: int, first: int) -> list[Any]:
        keys: list[bytes | None] = list(_keys(n, first)) if keyed else [None] * n
        return [v for key in keys for v in (BODY, key)]

    return _run(jobs, batch, text, values)


def floor_unique(_: str, table: str, jobs: int, batch: int) -> Timed:
    def values(n: int, first: int) -> list[Any]:
        return [v for key in _keys(n, first) for v in (BODY, 3, 3, "", None, None, key)]

    return _run(jobs, batch, lambda n: sql("enqueue_unique", table=table, rows=n), values)


def in_row_plain(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _with_keys(table, jobs, batch, keyed=False)


def in_row_unique(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _with_keys(table, jobs, batch, keyed=True)
