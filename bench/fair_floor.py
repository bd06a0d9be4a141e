"""What a keyed dequeue could cost on MySQL with start-time fair queuing,
as raw SQL, run by bench/core.py beside its keyed rows, in the same
worker processes.

``sfq_vs_unkeyed``: jobs of many fairness keys drained in turn by
start-time fair queuing, against the same drain of jobs without keys,
both as raw SQL on the store's job table with no job service in between.
Start-time fair queuing gives each keyed job, as it is admitted (state 5
to 4, a transaction of ``ADMIT`` jobs holding the table's fairness row),
a virtual start: the later of the virtual time (the start of the next
admitted job, or the latest claimed) and its key's last start, plus its
rank among the key's newcomers; a dequeue then claims by one indexed
``UPDATE ... ORDER BY vstart, id LIMIT n``, the plain claim's shape, and
asks whether newcomers wait, as the store's dequeue does. No lane row is
written or deleted at a dequeue, and no row is shared by every claim. It
is the floor of that design here: the ordering rules it would give
(between a key's jobs that come due at different times, jobs that come
back after a failure, the jobs without a key) are not the lanes' rules
and are not modelled; both drains carry the extra column and index, as
one table holding both kinds would.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from bench.workloads import BODY
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.mysql.statements import sql

DATABASE = "pinlater_bench_raw"
Timed = tuple[int, float, float]
# Newcomers admitted by one transaction, as the store's lanes admit them.
ADMIT = 2000
FILL = 1000  # rows per INSERT when filling a table (not timed)


def _connect() -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", database=DATABASE,
                           autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)


def prepare(jobs: int, keys: int) -> str:
    """A fresh job table (the store's, with a virtual start column and its
    index) and its tables of key starts and virtual time, holding ``jobs``
    jobs, due now: with ``keys`` > 0 newcomers (state 5) of that many keys
    in turn, else plain pending jobs (state 0). The job table's name."""
    table = job_table(f"raw_sfq_{uuid.uuid4().hex[:8]}", 1)
    ddl = sql("create_job_table", table=table)
    with_vstart = ddl.replace("  PRIMARY KEY (id),", "  vstart BIGINT NULL,\n  PRIMARY KEY (id),\n"
                                                     "  KEY by_vstart (state, vstart, id),")
    if with_vstart == ddl:
        raise RuntimeError("create_job_table has no 'PRIMARY KEY (id),' line to put the virtual start before")
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
    now = int(time.time() * 1000)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"USE {DATABASE}")
        cur.execute(with_vstart)
        cur.execute(f"CREATE TABLE {table}_starts (fkey VARBINARY(64) NOT NULL PRIMARY KEY, "
                    "last BIGINT NOT NULL) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {table}_vt (one TINYINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO {table}_vt VALUES (1, 0)")
        state = 5 if keys else 0
        for first in range(0, jobs, FILL):
            n = min(FILL, jobs - first)
            values: list[Any] = []
            for i in range(first, first + n):
                values += [state, BODY, now, now, now, f"k{i % keys}".encode() if keys else None]
            cur.execute(
                f"INSERT INTO {table} (state, body, attempts_allowed, attempts_remaining, created_at, run_after, "
                "updated_at, fkey) VALUES " + ", ".join(["(%s, %s, 3, 3, %s, %s, %s, %s)"] * n), values)
    conn.close()
    return table


def _admit(cur: Any, table: str, now: int) -> None:
    """Admits the first ``ADMIT`` due newcomers in one transaction."""
    text = (
        f"BEGIN; SELECT v INTO @v FROM {table}_vt WHERE one = 1 FOR UPDATE; "
        # The virtual time: the start of the next admitted job to be served,
        # or, none waiting, the latest start claimed (two index probes).
        f"SET @v = COALESCE((SELECT vstart FROM {table} FORCE INDEX (by_vstart) WHERE state = 4 "
        f"ORDER BY vstart, id LIMIT 1) - 1, GREATEST(@v, COALESCE((SELECT MAX(vstart) FROM {table} "
        "WHERE state = 1), 0))); "
        "CREATE TEMPORARY TABLE IF NOT EXISTS sfq_admit (id BIGINT UNSIGNED PRIMARY KEY, "
        "fkey VARBINARY(64) NOT NULL, rn INT NOT NULL) ENGINE=MEMORY; DELETE FROM sfq_admit; "
        "INSERT INTO sfq_admit SELECT id, fkey, ROW_NUMBER() OVER (PARTITION BY fkey ORDER BY run_after, id) "
        f"FROM (SELECT id, fkey, run_after FROM {table} WHERE state = 5 AND run_after <= %s "
        f"ORDER BY run_after, id LIMIT {ADMIT}) AS newcomers; "
        f"UPDATE {table} AS j JOIN sfq_admit AS a ON j.id = a.id LEFT JOIN {table}_starts AS s "
        "ON s.fkey = a.fkey SET j.state = 4, j.vstart = GREATEST(@v, COALESCE(s.last, 0)) + a.rn; "
        f"INSERT INTO {table}_starts (fkey, last) SELECT a.fkey, MAX(j.vstart) FROM sfq_admit AS a "
        f"JOIN {table} AS j ON j.id = a.id GROUP BY a.fkey ON DUPLICATE KEY UPDATE last = VALUES(last); "
        f"UPDATE {table}_vt SET v = @v WHERE one = 1; COMMIT")
    try:
        cur.execute(text, (now,))
        _results(cur)
    except pymysql.err.OperationalError as exc:
        # A deadlock with a claim rolled the admission back whole: the
        # newcomers wait for the next one, as the store's would.
        if exc.args[0] not in (1205, 1213):
            raise
        cur.execute("ROLLBACK")


def _results(cur: Any) -> list[tuple[Any, ...]]:
    """The rows of every result set of a multi-statement text that has some."""
    out: list[tuple[Any, ...]] = []
    while True:
        if cur.description:
            out.append(cur.fetchall())
        if not cur.nextset():
            return out


def _drain(table: str, jobs: int, batch: int, state: int) -> Timed:
    """As bench/core.py's raw claim loop; for keyed jobs (``state`` 4) each
    claim is by virtual start and, as the store's dequeue does, also asks
    whether newcomers wait, admitting them before the next claim."""
    conn = _connect()
    done = 0
    keyed = state == 4
    newcomers = keyed
    started = time.time()
    with conn.cursor() as cur:
        while done < jobs:
            claim = secrets.token_hex(8)
            now = int(time.time() * 1000)
            if newcomers:
                _admit(cur, table, now)
            # Admitted jobs were due when admitted: a claim of them reads the
            # virtual start's index alone (left to itself, the optimizer took
            # run_after's index and sorted every admitted job, a claim costing
            # three plain ones).
            due = "" if keyed else f"AND run_after <= {now} "
            hint = "FORCE INDEX (by_vstart) " if keyed else ""
            text = (f"UPDATE {table} {hint}SET state = 1, claim = %s, updated_at = %s WHERE state = {state} "
                    f"{due}ORDER BY {'vstart' if keyed else 'run_after'}, id LIMIT %s; ")
            args: list[Any] = [claim, now, min(batch, jobs - done)]
            text += f"SELECT id, body FROM {table} WHERE claim = %s"
            args.append(claim)
            if keyed:
                text += f"; SELECT EXISTS (SELECT 1 FROM {table} WHERE state = 5 AND run_after <= %s)"
                args.append(now)
            try:
                cur.execute(text, args)
                results = _results(cur)
            except pymysql.err.OperationalError as exc:
                # Concurrent claims can deadlock; rolled back, claim again.
                if exc.args[0] in (1205, 1213):
                    continue
                raise
            rows = results[0]
            newcomers = keyed and bool(results[1][0][0])
            if not rows:
                if newcomers:
                    continue
                break
            raw_ack(cur, table, [row[0] for row in rows])
            done += len(rows)
    ended = time.time()
    conn.close()
    return done, started, ended


def raw_ack(cur: Any, table: str, ids: list[int]) -> None:
    """The raw drains' ACK (this module's and bench/core.py's): ``ids``
    SUCCEEDED. It can lose a deadlock to another drainer's claim, which
    locks the state index in another order; the statement was rolled
    back, so it runs again (up to 10 times)."""
    text = f"UPDATE {table} SET state = 2, claim = NULL WHERE id IN ({','.join(['%s'] * len(ids))})"
    for attempt in range(10):
        try:
            cur.execute(text, ids)
            return
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (1205, 1213) or attempt == 9:
                raise


def plain_drain(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _drain(table, jobs, batch, 0)


def sfq_drain(_: str, table: str, jobs: int, batch: int) -> Timed:
    return _drain(table, jobs, batch, 4)
