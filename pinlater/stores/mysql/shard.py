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
from typing import Any, cast

from pinlater.kit.sqlblocks import MAX_PRIORITY, job_table
from pinlater.states import JobState
from pinlater.stores.base import CUSTOM_STATUS_MAX, Cancelled, EnqueueItem, Existing
from pinlater.stores.mysql.claims import ClaimsMixin
from pinlater.stores.mysql.connection import queue_lock
from pinlater.stores.mysql.errors import (
    CONSTRAINT_FAILED,
    DUPLICATE_KEY,
    UNTRIGGERED,
    MySQLStorageError,
    error_code,
)
from pinlater.stores.mysql.pool import INLINE, Session
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


def _drop_unique(s: Session, queue: str, priority: int, table: str, ids: list[int]) -> None:
    """Of jobs ``ids`` of ``table``, those that left storage drop the unique keys they held."""
    s.execute(sql("unique_drop_gone", table=table, ids=len(ids)), [queue, priority, *ids])


def _answers(
    items: Sequence[EnqueueItem], fresh: list[int], later: dict[int, int], groups: list[list[int]],
    firsts: list[int], step: int,
) -> list[int | Existing]:
    """A unique enqueue's answer: ``fresh`` items stored, by INSERTs of
    ``groups`` (indexes into ``fresh``) whose first ids are ``firsts``;
    each of ``later``, the job of its key stored before it in the call."""
    answers: list[int | Existing] = [0] * len(items)
    for group, first in zip(groups, firsts, strict=True):
        for k, i in enumerate(group):
            answers[fresh[i]] = first + k * step
    for index, first_index in later.items():
        answers[index] = Existing(items[first_index].priority, cast(int, answers[first_index]))
    return answers


class _Untriggered(Exception):
    """A job table cannot take unique keys by its trigger (nothing stored)."""


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
                s.execute(sql("drop_unique"), {"name": queue})
                s.execute(sql("unregister_queue"), {"name": queue})

        self._run(None, (), work)

    def queue_names(self) -> set[str]:
        return set(self.stored_queues())  # one row a queue either way

    def stored_queues(self) -> dict[str, int]:
        def work(s: Session) -> dict[str, int]:
            s.execute(sql("stored_queues"))
            return {str(name): int(priorities) for name, priorities in s.fetchall()}

        return self._run(None, (), work)

    # -- transitions ---------------------------------------------------------
    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        if not items:
            return []
        by_priority, inserts = self._inserts(queue, items)

        def work(s: Session) -> list[int]:
            ids = [0] * len(items)
            for group, stmt, values in inserts:
                s.execute(stmt, values)
                first = s.lastrowid
                for k, i in enumerate(group):
                    ids[i] = first + k * self._autoinc_step
            return ids

        return self._run(queue, by_priority, work, transaction=len(inserts) > 1)

    def _inserts(
        self, queue: str, items: Sequence[EnqueueItem], unique: bool = False
    ) -> tuple[dict[int, list[int]], list[tuple[list[int], str, list[Any]]]]:
        """How ``items`` are stored: their indexes by priority, and the
        INSERTs, each with the indexes of the items it stores (their ids
        are consecutive from its LAST_INSERT_ID(), step
        auto_increment_increment) and its values. ``unique``: with their
        unique keys, for the tables' trigger to take (layout 7 on)."""
        by_priority: dict[int, list[int]] = {}
        for index, item in enumerate(items):
            by_priority.setdefault(item.priority, []).append(index)
        chunks = [(p, c) for p in sorted(by_priority) for c in _chunks(items, by_priority[p])]
        self._learn_layout()
        # Lock mode 0 or 1 hands one multi-row INSERT consecutive ids (step
        # auto_increment_increment) from LAST_INSERT_ID(), the first of them.
        # Mode 2 (interleaved) does not: insert row by row, same transaction.
        per_row = self._autoinc_lock_mode == 2
        traced = self._traces or unique  # unique: layout 7, every column there
        # A batch with fairness keys (layout 5 on): keyed jobs wait in state 5
        # for the next dequeue to put them in their lanes (lanes.py).
        keyed = self._keys and any(it.key for it in items)
        insert = {(False, False): "enqueue_traced" if traced else "enqueue", (True, False): "enqueue_keyed",
                  (False, True): "enqueue_unique", (True, True): "enqueue_unique_keyed"}[keyed, unique]
        inserts: list[tuple[list[int], str, list[Any]]] = []
        for priority, chunk in chunks:
            for group in [[i] for i in chunk] if per_row else [chunk]:
                values: list[Any] = []
                for i in group:
                    it = items[i]
                    key = it.key.encode("utf-8") if it.key else None
                    if keyed:
                        values.append(key)
                    values += [it.body, it.attempts_allowed, it.attempts_allowed, it.custom_status, it.run_after_ms]
                    if keyed:
                        values += [it.trace, key]
                    elif traced:
                        values.append(it.trace)
                    if unique:
                        values.append(it.unique.encode("utf-8") if it.unique else None)
                inserts.append((group, sql(insert, table=job_table(queue, priority), rows=len(group)), values))
        return by_priority, inserts

    def enqueue_unique(
        self, queue: str, items: Sequence[EnqueueItem], succeeded_ms: int, priorities: int
    ) -> list[int | Existing]:
        """One round trip when no key has a row yet (the INSERTs alone,
        whose tables' trigger takes the keys, from layout 7 on; before it,
        or for a table without the trigger, ``unique_new``), or when none
        is held (``unique_begin``); else an inline transaction of two: the
        first locks the keys' rows (``unique_lock``) and reads which of
        them a job holds, at each of the queue's ``priorities``; the second
        stores the items whose keys are free, takes their keys and
        commits."""
        if not items:
            return []
        keys = sorted({it.unique.encode("utf-8") for it in items if it.unique})
        if not keys:
            return list(self.enqueue(queue, items))
        levels = range(1, max(priorities, *(it.priority for it in items)) + 1)
        self._learn_layout()
        try:
            take = "unique_trigger" if self._unique_trigger else "unique_new"
            stored = self._enqueue_if_free(queue, items, keys, levels, succeeded_ms, take)
        except _Untriggered:
            stored = self._enqueue_if_free(queue, items, keys, levels, succeeded_ms, "unique_new")
        if stored is None:
            stored = self._enqueue_if_free(queue, items, keys, levels, succeeded_ms, "unique_take")
        if stored is not None:
            return stored
        first_text: list[tuple[str, list[Any]]] = [
            (sql("unique_lock", rows=len(keys)), [v for k in keys for v in (queue, k)])]
        first_text += [
            (sql("unique_holders", table=job_table(queue, p), ids=len(keys)), [queue, p, *keys, succeeded_ms])
            for p in levels
        ]
        self._learn_layout()
        step = self._autoinc_step

        def work(s: Session) -> list[int | Existing]:
            found = s.begin_results(";\n".join(t for t, _ in first_text), [a for _, args in first_text for a in args])
            holders = {bytes(row[0]): Existing(p, int(row[1])) for p, rows in zip(levels, found, strict=True)
                       for row in rows}
            answers: list[int | Existing | None] = [None] * len(items)
            first_of: dict[bytes, int] = {}
            fresh: list[int] = []
            for index, item in enumerate(items):
                key = item.unique.encode("utf-8") if item.unique else None
                if key is not None and key in holders:
                    answers[index] = holders[key]
                elif key is None or key not in first_of:
                    fresh.append(index)
                    if key is not None:
                        first_of[key] = index
            if fresh:
                # Each INSERT, its first id, and the keys of its jobs taken.
                _, inserts = self._inserts(queue, [items[i] for i in fresh])
                text: list[tuple[str, list[Any]]] = []
                for group, stmt, values in inserts:
                    text += [(stmt, values), (sql("last_insert_id"), [])]
                    took = [(fresh[i], k) for k, i in enumerate(group) if items[fresh[i]].unique]
                    if took:
                        rows = [v for index, k in took
                                for v in (queue, items[index].unique.encode("utf-8"), items[index].priority, k * step)]
                        text.append((sql("unique_take", rows=len(took)), rows))
                firsts = s.commit_results(";\n".join(t for t, _ in text), [a for _, args in text for a in args])
                for (group, _, _), (row,) in zip(inserts, firsts, strict=True):
                    for k, i in enumerate(group):
                        answers[fresh[i]] = int(row[0]) + k * step
            for index, item in enumerate(items):
                if answers[index] is None:  # a later item of a key taken in this call
                    first = first_of[item.unique.encode("utf-8")]
                    answers[index] = Existing(items[first].priority, cast(int, answers[first]))
            return cast("list[int | Existing]", answers)

        return self._run(queue, levels, work, transaction=INLINE)

    def _enqueue_if_free(
        self, queue: str, items: Sequence[EnqueueItem], keys: list[bytes], levels: range, succeeded_ms: int,
        take: str,
    ) -> list[int | Existing] | None:
        """The items stored and their keys taken in one round trip: with
        ``take`` "unique_trigger" (the tables' trigger takes the keys) or
        "unique_new", if none of the keys has a row; with "unique_take", in
        a compound statement, if no job holds any of them. None (nothing
        stored) if that is not so; _Untriggered if a table has no trigger."""
        fresh: list[int] = []  # the items to store: no key, or the first of theirs in the call
        first_of: dict[str, int] = {}
        later: dict[int, int] = {}  # an item -> the earlier one of its key
        for index, item in enumerate(items):
            if not item.unique:
                fresh.append(index)
            elif item.unique in first_of:
                later[index] = first_of[item.unique]
            else:
                first_of[item.unique] = index
                fresh.append(index)
        step = self._autoinc_step
        if take == "unique_trigger":
            return self._enqueue_by_trigger(queue, items, fresh, later, levels)
        _, inserts = self._inserts(queue, [items[i] for i in fresh])
        if take == "unique_new":
            if len(first_of) < len(fresh):
                return None  # a job without a key: the compound statement's way
            stmts = [sql("begin")]
            args: list[Any] = []
            at: list[int] = []  # where each INSERT of jobs is among the statements
            for group, stmt, values in inserts:
                at.append(len(stmts))
                stmts.append(stmt)
                stmts.append(sql(take, rows=len(group), priority=items[fresh[group[0]]].priority, step=step))
                args += values
                args += [v for i in group for v in (queue, items[fresh[i]].unique.encode("utf-8"))]
            stmts.append(sql("commit"))
            script = ";\n".join(stmts)
            try:
                ids = self._run(queue, levels, lambda s: s.execute_script_ids(script, args))
            except MySQLStorageError as exc:
                if error_code(exc) != DUPLICATE_KEY:
                    raise
                return None
            firsts = [ids[i] for i in at]
        else:
            body: list[tuple[str, list[Any]]] = []
            for group, stmt, values in inserts:
                body += [(stmt, values), (sql("last_insert_id"), [])]
                took = [(items[fresh[i]], k) for k, i in enumerate(group) if items[fresh[i]].unique]
                if took:
                    rows = [v for item, k in took
                            for v in (queue, item.unique.encode("utf-8"), item.priority, k * step)]
                    body.append((sql(take, rows=len(took)), rows))
            held_at = "\n  OR ".join(sql("unique_held_at", table=job_table(queue, p), priority=p) for p in levels)
            text: list[tuple[str, list[Any]]] = [
                (sql("unique_begin"), [succeeded_ms]),
                (sql("unique_lock", rows=len(keys)), [v for k in keys for v in (queue, k)]),
                (sql("unique_held", ids=len(keys), page=held_at), [queue, *keys]),
            ]
            script = ("".join(f"{stmt};\n" for stmt, _ in text)
                      + sql("unique_if_free") + "\n" + "".join(f"{t};\n" for t, _ in body) + sql("unique_end"))
            args = [a for _, values in (*text, *body) for a in values]
            results = self._run(queue, levels, lambda s: s.execute_script(script, args))
            if int(results.pop()[0][0]):
                return None  # a key is held
            firsts = [int(row[0]) for (row,) in results]
        return _answers(items, fresh, later, [group for group, _, _ in inserts], firsts, step)

    def _enqueue_by_trigger(
        self, queue: str, items: Sequence[EnqueueItem], fresh: list[int], later: dict[int, int], levels: range
    ) -> list[int | Existing] | None:
        """``_enqueue_if_free``'s "unique_trigger" way: the INSERTs with
        each job's key, in a transaction only when there are several."""
        step = self._autoinc_step
        _, inserts = self._inserts(queue, [items[i] for i in fresh], unique=True)

        def work(s: Session) -> list[int]:
            firsts = []
            for _, stmt, values in inserts:
                s.execute(stmt, values)
                firsts.append(s.lastrowid)
            return firsts

        try:
            firsts = self._run(queue, levels, work, transaction=len(inserts) > 1)
        except MySQLStorageError as exc:
            code = error_code(exc)
            if code == DUPLICATE_KEY:
                return None
            if code not in UNTRIGGERED:
                raise
            # A table made by older code (no ukey column) or by a process
            # that died before making its trigger (the key refused): the
            # latter is armed now, and this call takes its keys the old way.
            if code == CONSTRAINT_FAILED:
                self._create_tables(queue, list(levels), revive=False)
            raise _Untriggered from exc
        return _answers(items, fresh, later, [group for group, _, _ in inserts], firsts, step)

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
            deleted = s.execute(stmt, [int(state), older_than_ms, *ids])
            _drop_unique(s, queue, priority, table, ids)
            return deleted

        return self._run(queue, (priority,), work)

    def release(self, queue: str, priority: int, local_ids: Sequence[int]) -> list[JobState | None]:
        if not local_ids:
            return []
        table = job_table(queue, priority)
        ids = sorted({int(i) for i in local_ids})

        def work(s: Session) -> dict[int, JobState]:
            s.execute(sql("release", table=table, ids=len(ids)), ids)
            s.execute(sql("release_states", table=table, ids=len(ids)), ids)
            return {int(row[0]): STATES[int(row[1])] for row in s.fetchall()}

        states = self._run(queue, (priority,), work, transaction=True)
        return [states.get(int(i)) for i in local_ids]

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
            else:
                deleted = s.execute(sql("delete_ids", table=table, ids=len(ids)), [int(state), *ids])
            _drop_unique(s, queue, priority, table, ids)
            return deleted

        return self._run(queue, (priority,), work, transaction=pending)
