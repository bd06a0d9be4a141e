"""The MySQL shard's reads: count, scan (newest first, by (sort time, id)
cursor) and lookup. A part of ``MySQLBackend`` (``shard``)."""


from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.kit.sqlblocks import job_table
from pinlater.states import JobState
from pinlater.stores.base import JobRecord, ScanQuery
from pinlater.stores.mysql.connection import ShardConnection
from pinlater.stores.mysql.pool import Session
from pinlater.stores.mysql.statements import sql

_CURSOR_TOP = (2**63 - 1, 2**64 - 1)  # "before" everything: (sort time, id)


# Pending with a fairness key: in its lane (4) or waiting to be (5).
STATES = {0: JobState.PENDING, 1: JobState.RUNNING, 2: JobState.SUCCEEDED, 3: JobState.FAILED,
           4: JobState.PENDING, 5: JobState.PENDING}


def _record(row: tuple[Any, ...], priority: int) -> JobRecord:
    state = STATES[int(row[1])]
    return JobRecord(
        local_id=int(row[0]),
        priority=priority,
        state=state,
        attempts_allowed=int(row[2]),
        attempts_remaining=int(row[3]),
        custom_status=str(row[4]),
        created_at_ms=int(row[5]),
        run_after_ms=int(row[6]),
        updated_at_ms=int(row[7]),
        claim=str(row[8]) if state is JobState.RUNNING and row[8] is not None else None,
        body=None if row[9] is None else bytes(row[9]),
        key="" if row[10] is None else bytes(row[10]).decode("utf-8"),
    )


class ReadsMixin(ShardConnection):
    """Count, scan and lookup of ``MySQLBackend``."""

    def count(self, queue: str, priority: int, state: JobState, future: bool) -> int:
        table = job_table(queue, priority)
        if state is JobState.PENDING:
            stmt = sql("count_pending_future" if future else "count_pending_now", table=table)
            return self._read(lambda s: int(s.scalar(stmt)), 0)
        stmt = sql("count_state", table=table)
        return self._read(lambda s: int(s.scalar(stmt, {"state": int(state)})), 0)

    def scan(self, query: ScanQuery) -> list[JobRecord]:
        q = query
        priority = q.priority
        if q.limit <= 0:
            return []
        name = "scan_state"
        if q.state is JobState.PENDING:
            name = "scan_pending_future" if q.future else "scan_pending_now"
        self._learn_layout()
        stmt = sql(name, table=job_table(q.queue, priority), body=q.include_body, fkey=self._keys)
        sort_time, local_id = q.before if q.before is not None else _CURSOR_TOP
        args = {"state": int(q.state), "st": sort_time, "id": local_id, "limit": q.limit}
        within = False
        if q.include_body and q.max_body_bytes is not None:
            within = True
            stmt = sql("scan_within", page=stmt)
            args["budget"] = q.max_body_bytes

        def work(s: Session) -> list[JobRecord]:
            s.execute(stmt, args)
            records = []
            for row in s.fetchall():
                records.append(_record(row, priority))
                if within and row[9] is None:
                    break  # withheld: the page ends here
            return records

        return self._read(work, [])

    def lookup(
        self,
        queue: str,
        priority: int,
        local_ids: Sequence[int],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord | None]:
        table = job_table(queue, priority)
        ids = sorted({int(i) for i in local_ids})
        if not ids:
            return []
        args: list[int] = ids
        self._learn_layout()
        if include_body and max_body_bytes is not None:
            stmt = sql("lookup_within", table=table, ids=len(ids), fkey=self._keys)
            args = [max_body_bytes, *ids, *ids]
        else:
            stmt = sql("lookup", table=table, ids=len(ids), body=include_body, fkey=self._keys)

        def work(s: Session) -> dict[int, JobRecord]:
            s.execute(stmt, args)
            return {int(row[0]): _record(row, priority) for row in s.fetchall()}

        found: dict[int, JobRecord] = self._read(work, {})
        return [found.get(int(i)) for i in local_ids]
