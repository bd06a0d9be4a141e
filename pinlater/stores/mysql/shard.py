"""The MySQL (MariaDB) shard: one database per shard, one InnoDB table per
(queue, priority), every statement from ``sql/mysql.sql``. Claims are in
``claims``, reads in ``reads``, the pool and the one way statements run in
``connection``; writes and garbage collection here.

Round trips per call are fixed: enqueue is one multi-row INSERT (BEGIN/COMMIT
around it only when a batch spans several tables or is very large); dequeue
is one compound statement whatever the number of priorities (a transaction
of claiming UPDATE ... LIMITs, priority by priority while jobs are missing,
and a look ahead, committed before the claimed jobs are read back by claim);
ACKs are one guarded single-table UPDATE per table, whose row count says
"all applied" or "all stale" and which, for several items, leaves its own
marker in the claim column, so that only a mixed batch costs a second round
trip (the read back of the marked ids). Checkpoints are BEGIN, per table a locking
read of the RUNNING rows and one guarded UPDATE, COMMIT: a heartbeat keeps
the claim, so it cannot carry a marker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pinlater.kit.sqlblocks import MAX_PRIORITY, job_table
from pinlater.states import JobState
from pinlater.stores.base import CUSTOM_STATUS_MAX, Cancelled, EnqueueItem
from pinlater.stores.mysql.claims import ClaimsMixin
from pinlater.stores.mysql.connection import queue_lock
from pinlater.stores.mysql.pool import Session
from pinlater.stores.mysql.reads import STATES, ReadsMixin
from pinlater.stores.mysql.statements import sql

INSERT_CHUNK_BYTES = 4 << 20  # well under MariaDB's default 16 MB max_allowed_packet


def _chunks(items: Sequence[EnqueueItem], indexes: list[int]) -> list[list[int]]:
    """Split one table's rows so that no INSERT nears max_allowed_packet
    (escaping can double a body; utf-8 takes up to 4 bytes a character)."""
    chunks: list[list[int]] = [[]]
    size = 0
    for index in indexes:
        item = items[index]
        cost = 2 * len(item.body) + 4 * len(item.custom_status) + 256
        if chunks[-1] and size + cost > INSERT_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(index)
        size += cost
    return chunks


class MySQLBackend(ClaimsMixin, ReadsMixin):
    def create_queue(self, queue: str, priorities: int) -> None:
        if not 1 <= priorities <= MAX_PRIORITY:
            raise ValueError(f"priorities must be in 1..{MAX_PRIORITY}")
        self._create_tables(queue, range(1, priorities + 1), revive=True)

    def delete_queue(self, queue: str) -> None:
        job_table(queue, 1)  # validates the name
        pattern = re.compile(rf"q_{re.escape(queue)}_p([0-9]+)")

        def work(s: Session) -> None:
            with queue_lock(s, queue):
                # First, so that from the first table dropped no enqueue makes one again.
                s.execute(sql("mark_queue_deleted"), {"name": queue})
                s.execute(sql("list_tables"))
                # Every table of the queue, not just those the queues row knows of.
                for (name,) in s.fetchall():
                    match = pattern.fullmatch(str(name))
                    if match and 1 <= int(match.group(1)) <= MAX_PRIORITY:
                        table = job_table(queue, int(match.group(1)))
                        s.execute(sql("drop_job_table", table=table))
                        for rows in ("drop_lanes", "drop_lane_jobs", "drop_fair"):
                            s.execute(sql(rows), {"jobs": table})
                s.execute(sql("unregister_queue"), {"name": queue})

        self._run(None, (), work)

    def queue_names(self) -> set[str]:
        def work(s: Session) -> set[str]:
            s.execute(sql("queue_names"))
            return {str(row[0]) for row in s.fetchall()}

        return self._run(None, (), work)

    # -- transitions ---------------------------------------------------------
    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        if not items:
            return []
        by_priority: dict[int, list[int]] = {}
        for index, item in enumerate(items):
            by_priority.setdefault(item.priority, []).append(index)
        tables = {p: job_table(queue, p) for p in by_priority}
        chunks = [(p, c) for p in sorted(by_priority) for c in _chunks(items, by_priority[p])]
        self._learn_layout()
        # Lock mode 0 or 1 hands one multi-row INSERT consecutive ids (step
        # auto_increment_increment) from LAST_INSERT_ID(), the first of them.
        # Mode 2 (interleaved) does not: insert row by row, same transaction.
        per_row = self._autoinc_lock_mode == 2
        statements = len(items) if per_row else len(chunks)
        traced = self._traces
        # A batch with fairness keys (layout 5 on): keyed jobs wait in state 5
        # for the next dequeue to put them in their lanes (lanes.py).
        keyed = self._keys and any(it.key for it in items)
        insert = "enqueue_keyed" if keyed else "enqueue_traced" if traced else "enqueue"

        def work(s: Session) -> list[int]:
            ids = [0] * len(items)
            for priority, chunk in chunks:
                groups = [[i] for i in chunk] if per_row else [chunk]
                for group in groups:
                    values: list[Any] = []
                    for i in group:
                        it = items[i]
                        key = it.key.encode("utf-8") if it.key else None
                        if keyed:
                            values.append(key)
                        values += [it.body, it.attempts_allowed, it.attempts_allowed,
                                   it.custom_status, it.run_after_ms]
                        if keyed:
                            values += [it.trace, key]
                        elif traced:
                            values.append(it.trace)
                    s.execute(sql(insert, table=tables[priority], rows=len(group)), values)
                    first = s.lastrowid
                    for k, i in enumerate(group):
                        ids[i] = first + k * self._autoinc_step
            return ids

        return self._run(queue, by_priority, work, transaction=statements > 1)

    def gc(self, queue: str, priority: int, state: JobState, older_than_ms: int, limit: int) -> int:
        table = job_table(queue, priority)
        if not JobState(state).is_terminal:
            raise ValueError(f"gc deletes SUCCEEDED or FAILED jobs, not {JobState(state).name}")
        if limit <= 0:
            return 0
        args = {"state": int(state), "older_than_ms": older_than_ms, "limit": limit}

        def work(s: Session) -> int:
            s.execute(sql("gc_pick", table=table), args)
            ids = [int(row[0]) for row in s.fetchall()]
            if not ids:
                return 0
            stmt = sql("gc_delete", table=table, ids=len(ids))
            return s.execute(stmt, [int(state), older_than_ms, *ids])

        return self._run(queue, (priority,), work)

    def retry_failed(
        self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        table = job_table(queue, priority)
        if limit <= 0:
            return 0
        args = {"attempts": attempts, "run_after": run_after_ms, "limit": limit}
        self._learn_layout()
        stmt = sql("retry_failed", table=table, fkey=self._keys)
        return self._run(queue, (priority,), lambda s: s.execute(stmt, args))

    def cancel(self, queue: str, priority: int, local_ids: Sequence[int], status: str) -> list[Cancelled]:
        table = job_table(queue, priority)
        ids = sorted({int(i) for i in local_ids})
        if not ids:
            return []
        self._learn_layout()

        def work(s: Session) -> dict[int, Cancelled]:
            # As a delete of pending jobs: newcomers join their lanes first.
            self._admit_newcomers(s, table)
            s.execute(sql("cancel_lock", table=table, ids=len(ids), fkey=self._keys), ids)
            found = {int(i): Cancelled(STATES[int(state)], claim if int(state) == 1 else None,
                                       bytes(fkey).decode() if fkey else "")
                     for i, state, claim, fkey in s.fetchall()}
            ending = [i for i, c in found.items() if c.state in (JobState.PENDING, JobState.RUNNING)]
            if ending:
                s.execute(sql("cancel_end", table=table, ids=len(ending)), [status[-CUSTOM_STATUS_MAX:], *ending])
                s.execute(sql("lane_jobs_take", ids=len(ending)), [table, *ending])
            return found

        found = self._run(queue, (priority,), work, transaction=True)
        return [found.get(int(i), Cancelled(None)) for i in local_ids]

    def delete(
        self,
        queue: str,
        priority: int,
        state: JobState,
        local_ids: Sequence[int] | None,
        limit: int,
    ) -> int:
        table = job_table(queue, priority)
        if (limit <= 0) if local_ids is None else not local_ids:
            return 0

        pending = state is JobState.PENDING
        self._learn_layout()

        def work(s: Session) -> int:
            if pending:
                self._admit_newcomers(s, table)
            if local_ids is None:
                pick = "delete_pick_pending" if pending else "delete_pick"
                s.execute(sql(pick, table=table), {"state": int(state), "limit": limit})
                ids = [int(row[0]) for row in s.fetchall()]
            else:
                ids = sorted({int(i) for i in local_ids})
            if not ids:
                return 0
            # Only the jobs still in ``state`` (pending: keyed or not, and
            # out of their lanes in the same transaction).
            if pending:
                deleted = s.execute(sql("delete_pending_ids", table=table, ids=len(ids)), ids)
                s.execute(sql("lane_jobs_take", ids=len(ids)), [table, *ids])
                return deleted
            return s.execute(sql("delete_ids", table=table, ids=len(ids)), [int(state), *ids])

        return self._run(queue, (priority,), work, transaction=pending)
