"""The MySQL (MariaDB) shard: one database per shard, one InnoDB table per
(queue, priority), every statement from ``sql/mysql.sql``.

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

import contextlib
import json
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from pinlater.errors import QueueDeleted, StorageError
from pinlater.kit.sqlblocks import MAX_PRIORITY, job_table
from pinlater.states import JobState
from pinlater.stores.base import (
    CLAIM_TOKEN_LEN,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    Claims,
    EnqueueItem,
    ExpiredClaims,
    FailItem,
    JobRecord,
    ShardUnavailable,
    holds,
)
from pinlater.stores.mysql.layout import MYSQL_SHARD, check_mysql_layout
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session, run_creating_missing_tables
from pinlater.stores.mysql.statements import sql

T = TypeVar("T")

CLAIM_MAX = 255  # the claim column's width
QUEUE_LOCK_WAIT_S = 30  # a queue's tables being dropped: seconds at most, even for a big queue
TRACE_LAYOUT = 4  # the layout from which job tables have the trace column
INSERT_CHUNK_BYTES = 4 << 20  # well under MariaDB's default 16 MB max_allowed_packet
_CURSOR_TOP = (2**63 - 1, 2**64 - 1)  # "before" everything: (sort time, id)
PROBE_ROW = "pinlater probe"  # the prober's row in ``queues`` (never kept): no queue name has a space


@contextlib.contextmanager
def _queue_lock(s: Session, queue: str) -> Iterator[None]:
    """The queue's named lock on this shard's server for the block."""
    if s.scalar(sql("lock_queue"), {"name": queue, "timeout": QUEUE_LOCK_WAIT_S}) != 1:
        raise StorageError(f"queue {queue!r}: its tables were busy being dropped or made for {QUEUE_LOCK_WAIT_S} s")
    try:
        yield
    except BaseException:
        # The error in flight is the one to report; a session that died frees its locks.
        with contextlib.suppress(Exception):
            s.execute(sql("unlock_queue"), {"name": queue})
        raise
    s.execute(sql("unlock_queue"), {"name": queue})


class _Targeted(Protocol):
    """What AckItem, FailItem and CheckpointItem share."""

    @property
    def priority(self) -> int: ...
    @property
    def local_id(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def claim(self) -> str | None: ...


_Item = TypeVar("_Item", bound=_Targeted)


def _record(row: tuple[Any, ...], priority: int) -> JobRecord:
    state = JobState(int(row[1]))
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
    )


def _rounds(items: Sequence[_Targeted]) -> list[dict[int, list[int]]]:
    """Item indexes split so that no round touches a job twice (round k holds
    every job's k-th occurrence), grouped by priority. A batch naming a job
    twice is thus applied in order, like a per-item loop would."""
    seen: dict[tuple[int, int], int] = {}
    rounds: list[dict[int, list[int]]] = []
    for index, item in enumerate(items):
        key = (item.priority, item.local_id)
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k == len(rounds):
            rounds.append({})
        rounds[k].setdefault(item.priority, []).append(index)
    return rounds


def _by_holder(items: Sequence[_Targeted], indexes: list[int]) -> list[tuple[bool, list[int]]]:
    """One table's items split into those that name their claim (True) and
    those that give only a source (False): an ACK statement compares one or
    the other (``{held}`` in the SQL file). Usually all are of one kind."""
    exact = [i for i in indexes if items[i].claim is not None]
    if len(exact) == len(indexes):
        return [(True, indexes)]
    if not exact:
        return [(False, indexes)]
    return [(True, exact), (False, [i for i in indexes if items[i].claim is None])]


def _holders(items: Sequence[_Targeted], indexes: list[int]) -> list[str]:
    """What each item's job's claim must hold to (see ``_by_holder``)."""
    return [items[i].claim or items[i].source for i in indexes]


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


@lru_cache(maxsize=1024)
def _dequeue_text(queue: str, priorities: tuple[int, ...], look_ahead: tuple[int, ...], traced: bool) -> str:
    """The one-round-trip dequeue: one compound statement (see dequeue_begin
    in the SQL file). Its arguments: ``_dequeue_args``."""
    tables = [(p, job_table(queue, p)) for p in priorities]
    inner = [sql("dequeue_declare", priority=p) for p in priorities]
    inner.append(sql("dequeue_start"))
    inner += [sql("dequeue_claim", table=t, priority=p) for p, t in tables]
    if look_ahead:
        branches = _look_ahead(queue, look_ahead)
        inner.append(f"{sql('dequeue_if_missing')}\n{branches};\n{sql('dequeue_end_if')}")
    inner.append(sql("dequeue_commit"))
    inner += [sql("dequeue_read", table=t, priority=p, trace=traced) for p, t in tables]
    statements = [sql("dequeue_begin"), *inner]
    return "".join(f"{stmt};\n" for stmt in statements) + sql("dequeue_end")


def _dequeue_args(priorities: Sequence[int], limit: int, claim: str, look_ahead: Sequence[int]) -> list[Any]:
    claims = [claim] * len(priorities)
    return [limit, *claims, *_look_ahead_args(look_ahead), *claims]


def _peek_script(
    queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int], traced: bool
) -> tuple[str, list[Any]]:
    statements = [sql("peek", table=job_table(queue, p), priority=p, trace=traced) for p in priorities]
    args: list[Any] = [limit] * len(priorities)
    if look_ahead:
        statements.append(_look_ahead(queue, look_ahead))
        args += _look_ahead_args(look_ahead)
    return ";\n".join(statements), args


def _look_ahead(queue: str, look_ahead: Sequence[int]) -> str:
    """The look_ahead statement (its arguments: ``_look_ahead_args``)."""
    branches = [sql("look_ahead", table=job_table(queue, p)) for p in look_ahead]
    return "\nUNION ALL\n".join(branches) + "\nORDER BY pos LIMIT 1"


def _look_ahead_args(look_ahead: Sequence[int]) -> list[int]:
    return [x for pos, priority in enumerate(look_ahead) for x in (pos, priority)]


# id, body, attempts allowed and remaining, priority, trace, run_after; a look-ahead row has 2
_JOB_COLUMNS = 7


def _claims(results: list[tuple[tuple[Any, ...], ...]], limit: int, claim: str) -> Claims:
    """Decode the results of a dequeue or peek: result sets of jobs, in
    priority order, whose rows end with their priority, and (when looked
    ahead, and not every job was found) one of (pos, priority) naming the
    first runnable look-ahead priority."""
    jobs: list[ClaimedJob] = []
    following: tuple[tuple[Any, ...], ...] = ()
    for rows in results:
        if rows and len(rows[0]) != _JOB_COLUMNS:
            following = rows
            continue
        jobs += [
            ClaimedJob(int(r[0]), int(r[4]), bytes(r[1]), int(r[2]), int(r[3]), claim, r[5], int(r[6])) for r in rows
        ]
    del jobs[limit:]  # a peek reads up to limit per priority
    if len(jobs) >= limit or not following:
        return Claims(jobs)
    return Claims(jobs, int(following[0][1]))


class MySQLBackend:
    def __init__(self, shard_id: str, address: MySQLAddress, socket_timeout_s: float = 5.0) -> None:
        self.shard_id = shard_id
        self._address = address
        # Filled on the first connection: how AUTO_INCREMENT hands out ids.
        self._autoinc_lock_mode: int | None = None
        self._autoinc_step = 1
        self._traces = False
        self._pool = ConnectionPool(
            address,
            socket_timeout_s=socket_timeout_s,
            prepare=self._prepare,
            unavailable=self._unavailable,
        )

    @classmethod
    def from_url(cls, shard_id: str, url: str, socket_timeout_s: float = 5.0) -> MySQLBackend:
        return cls(shard_id, MySQLAddress.parse(url), socket_timeout_s)

    def __repr__(self) -> str:
        return f"MySQLBackend({self.shard_id!r}, {self._address})"

    def _unavailable(self, cause: BaseException) -> ShardUnavailable:
        where = f"shard {self.shard_id} (mysql {self._address})"
        return ShardUnavailable(f"{where} unavailable: {cause}")

    def _prepare(self, s: Session) -> None:
        layout = check_mysql_layout(s, MYSQL_SHARD, f"shard {self.shard_id} (mysql {self._address})")
        # Job tables have the trace column from layout 4 on.
        self._traces = layout >= TRACE_LAYOUT
        s.execute(sql("create_queues_table"))
        s.execute(sql("create_deleted_queues_table"))
        s.execute(sql("server_autoinc"))
        row = s.fetchone()
        self._autoinc_lock_mode, self._autoinc_step = int(row[0]), int(row[1])

    def _run(
        self,
        queue: str | None,
        priorities: Iterable[int],
        work: Callable[[Session], T],
        transaction: bool = False,
    ) -> T:
        """Run ``work``. A missing table (the queue was created while this
        shard was down, or the database was recreated) is created and the
        work retried once: the queue's tables for ``priorities``, and the
        ``queues`` table; but not those of a queue deleted here
        (QueueDeleted)."""

        def create() -> None:
            if queue is not None:
                self._create_tables(queue, sorted(set(priorities)), revive=False)

        return run_creating_missing_tables(self._pool, work, transaction=transaction, create=create)

    def _create_tables(self, queue: str, priorities: Sequence[int], *, revive: bool) -> None:
        """The queue's tables for ``priorities``. ``revive``: lift a
        deletion of the queue here (create_queue); otherwise a queue
        deleted here raises QueueDeleted and gets no tables."""
        tables = [job_table(queue, p) for p in priorities]
        name = {"name": queue}

        # The queues and deleted_queues tables are the pool's own (``_prepare``):
        # should either be missing, the retry in ``_run`` makes them and runs this again.
        def work(s: Session) -> None:
            with _queue_lock(s, queue):
                if revive:
                    s.execute(sql("unmark_queue_deleted"), name)
                elif s.scalar(sql("queue_deleted"), name):
                    raise QueueDeleted(queue, self.shard_id)
                for table in tables:
                    s.execute(sql("create_job_table", table=table))
                s.execute(sql("register_queue"), {"name": queue, "priorities": max(priorities)})

        self._run(None, (), work)

    # -- housekeeping ------------------------------------------------------
    def ping(self) -> None:
        self._pool.run(lambda s: s.execute(sql("ping")))

    def probe(self) -> None:
        run_creating_missing_tables(self._pool, lambda s: s.execute_script(sql("probe"), [PROBE_ROW]))

    def now_ms(self) -> int:
        return self._pool.run(lambda s: int(s.scalar(sql("now"))))

    def close(self) -> None:
        self._pool.close()

    def create_queue(self, queue: str, priorities: int) -> None:
        if not 1 <= priorities <= MAX_PRIORITY:
            raise ValueError(f"priorities must be in 1..{MAX_PRIORITY}")
        self._create_tables(queue, range(1, priorities + 1), revive=True)

    def delete_queue(self, queue: str) -> None:
        job_table(queue, 1)  # validates the name
        pattern = re.compile(rf"q_{re.escape(queue)}_p([0-9]+)")

        def work(s: Session) -> None:
            with _queue_lock(s, queue):
                # First, so that from the first table dropped no enqueue makes one again.
                s.execute(sql("mark_queue_deleted"), {"name": queue})
                s.execute(sql("list_tables"))
                # Every table of the queue, not just those the queues row knows of.
                for (name,) in s.fetchall():
                    match = pattern.fullmatch(str(name))
                    if match and 1 <= int(match.group(1)) <= MAX_PRIORITY:
                        s.execute(sql("drop_job_table", table=job_table(queue, int(match.group(1)))))
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
        if self._autoinc_lock_mode is None:
            self.ping()  # the first connection learns the AUTO_INCREMENT settings
        # Lock mode 0 or 1 hands one multi-row INSERT consecutive ids (step
        # auto_increment_increment) from LAST_INSERT_ID(), the first of them.
        # Mode 2 (interleaved) does not: insert row by row, same transaction.
        per_row = self._autoinc_lock_mode == 2
        statements = len(items) if per_row else len(chunks)
        traced = self._traces
        insert = "enqueue_traced" if traced else "enqueue"

        def work(s: Session) -> list[int]:
            ids = [0] * len(items)
            for priority, chunk in chunks:
                groups = [[i] for i in chunk] if per_row else [chunk]
                for group in groups:
                    values: list[Any] = []
                    for i in group:
                        it = items[i]
                        values += [it.body, it.attempts_allowed, it.attempts_allowed,
                                   it.custom_status, it.run_after_ms]
                        if traced:
                            values.append(it.trace)
                    s.execute(sql(insert, table=tables[priority], rows=len(group)), values)
                    first = s.lastrowid
                    for k, i in enumerate(group):
                        ids[i] = first + k * self._autoinc_step
            return ids

        return self._run(queue, by_priority, work, transaction=statements > 1)

    def dequeue(
        self,
        queue: str,
        priorities: Sequence[int],
        limit: int,
        source: str,
        look_ahead: Sequence[int] = (),
    ) -> Claims:
        claim = f"{secrets.token_hex(CLAIM_TOKEN_LEN // 2)}@{source}"
        if len(claim) > CLAIM_MAX:
            raise ValueError(f"source is too long ({len(source)} characters)")
        if limit <= 0 or not priorities:
            return Claims([])
        if self._autoinc_lock_mode is None:
            self.ping()  # the first connection learns the layout
        text = _dequeue_text(queue, tuple(priorities), tuple(look_ahead), self._traces)
        args = _dequeue_args(priorities, limit, claim, look_ahead)

        def work(s: Session) -> Claims:
            # Committed when this returns: should the connection die after,
            # these jobs stay RUNNING until their claim times out (nothing is lost).
            return _claims(s.execute_script(text, args), limit, claim)

        return self._run(queue, (*priorities, *look_ahead), work)

    def peek(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()
    ) -> Claims:
        if limit <= 0 or not priorities:
            return Claims([])
        if self._autoinc_lock_mode is None:
            self.ping()  # the first connection learns the layout
        text, args = _peek_script(queue, priorities, limit, look_ahead, self._traces)
        work = lambda s: _claims(s.execute_script(text, args), limit, "")  # noqa: E731
        return self._run(queue, (*priorities, *look_ahead), work)

    def _guarded(
        self,
        queue: str,
        items: Sequence[_Item],
        statement: str,
        values: Callable[[_Item, str], list[Any]],
    ) -> list[bool]:
        """Apply ``statement`` to the items whose job is RUNNING under a claim
        the item holds (``holds``), in one transaction. ``values(item,
        claim)`` gives the item's row of the joined values, ``claim`` being
        the job's claim as locked."""
        if not items:
            return []
        rounds = _rounds(items)
        tables = {item.priority: job_table(queue, item.priority) for item in items}

        def work(s: Session) -> list[bool]:
            applied = [False] * len(items)
            for round_ in rounds:
                for priority, indexes in sorted(round_.items()):
                    table = tables[priority]
                    ids = [items[i].local_id for i in indexes]
                    s.execute(sql("lock_running", table=table, ids=len(ids)), ids)
                    running = {int(r[0]): r[1] for r in s.fetchall()}
                    chosen: list[int] = []
                    params: list[Any] = []
                    for i in indexes:
                        item = items[i]
                        claim = running.get(item.local_id)
                        if claim is None or not holds(claim, item.source, item.claim):
                            continue
                        chosen.append(i)
                        params += values(item, claim)
                    if not chosen:
                        continue
                    updated = s.execute(sql(statement, table=table, rows=len(chosen)), params)
                    if updated != len(chosen):  # cannot happen while the rows are locked
                        raise StorageError(
                            f"{statement} on {table}: {updated} of {len(chosen)} locked jobs"
                            " updated"
                        )
                    for i in chosen:
                        applied[i] = True
            return applied

        return self._run(queue, tables, work, transaction=True)

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        def args(indexes: list[int], marker: str | None) -> list[Any]:
            ids = [items[i].local_id for i in indexes]
            return [marker, *ids, *(items[i].append_custom_status for i in indexes),
                    *ids, *ids, *_holders(items, indexes)]

        return self._acked(queue, items, "ack_succeeded", args)

    def ack_failed(
        self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()
    ) -> list[bool]:
        if not delay_table and any(it.delay_ms is None for it in items):
            raise ValueError("a failure ACK without its own delay needs the policy's delay table")
        table = json.dumps([int(d) for d in delay_table] or [0])
        last = max(0, len(delay_table) - 1)

        def args(indexes: list[int], marker: str | None) -> list[Any]:
            ids = [items[i].local_id for i in indexes]
            delays = [items[i].delay_ms for i in indexes]
            return [*ids, *delays, table, last, *ids, *(items[i].append_custom_status for i in indexes),
                    marker, *ids, *ids, *_holders(items, indexes)]

        return self._acked(queue, items, "ack_failed", args)

    def _acked(
        self,
        queue: str,
        items: Sequence[_Item],
        statement: str,
        args: Callable[[list[int], str | None], list[Any]],
    ) -> list[bool]:
        """ACKs: one guarded UPDATE per table (see ack_succeeded in the SQL
        file) whose row count tells all applied or all stale; only a mixed
        batch reads back which items this statement applied (by the marker
        it left; a single item needs none, so its claim stays). Items that
        name their claim and items that give a source go in statements of
        their own (``_by_holder``). Several statements (several tables, a
        job named twice, or both kinds of item) share one transaction, all
        or nothing as before."""
        if not items:
            return []
        steps = [
            (job_table(queue, priority), exact, held)
            for round_ in _rounds(items)
            for priority, indexes in sorted(round_.items())
            for exact, held in _by_holder(items, indexes)
        ]

        def work(s: Session) -> list[bool]:
            applied = [False] * len(items)
            for table, exact, indexes in steps:
                # One item's row count tells applied from stale: no marker.
                marker = f"acked:{secrets.token_hex(CLAIM_TOKEN_LEN // 2)}" if len(indexes) > 1 else None
                stmt = sql(statement, table=table, ids=len(indexes), exact_claim=exact)
                updated = s.execute(stmt, args(indexes, marker))
                if updated == len(indexes):
                    done = {items[i].local_id for i in indexes}
                elif updated == 0:
                    done = set()
                else:
                    s.execute(sql("ack_applied", table=table), [marker])
                    done = {int(row[0]) for row in s.fetchall()}
                for i in indexes:
                    applied[i] = items[i].local_id in done
            return applied

        tables = {item.priority for item in items}
        return self._run(queue, tables, work, transaction=len(steps) > 1)

    def checkpoint(self, queue: str, items: Sequence[CheckpointItem]) -> list[bool]:
        def values(item: CheckpointItem, claim: str) -> list[Any]:
            return [item.local_id, claim, item.new_body, item.attempts_allowed,
                    item.prepend_custom_status or "", item.run_after_ms,
                    1 if item.move_to_pending else 0]

        return self._guarded(queue, items, "checkpoint", values)

    def expire_claims(
        self, queue: str, priority: int, timeout_ms: int, limit: int
    ) -> ExpiredClaims:
        table = job_table(queue, priority)
        if limit <= 0:
            return ExpiredClaims(0, 0)

        def work(s: Session) -> ExpiredClaims:
            # Two statements so that each count is known; each row's change is
            # one atomic, guarded UPDATE, so concurrent monitors expire a job once.
            args = {"timeout_ms": timeout_ms, "limit": limit}
            repended = s.execute(sql("expire_repend", table=table), args)
            failed = 0
            if repended < limit:
                args["limit"] = limit - repended
                failed = s.execute(sql("expire_fail", table=table), args)
            return ExpiredClaims(repended, failed)

        return self._run(queue, (priority,), work)

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
        return self._run(
            queue, (priority,), lambda s: s.execute(sql("retry_failed", table=table), args)
        )

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

        def work(s: Session) -> int:
            if local_ids is None:
                s.execute(sql("delete_pick", table=table), {"state": int(state), "limit": limit})
                ids = [int(row[0]) for row in s.fetchall()]
            else:
                ids = sorted({int(i) for i in local_ids})
            if not ids:
                return 0
            # Only the jobs still in ``state``.
            stmt = sql("delete_ids", table=table, ids=len(ids))
            return s.execute(stmt, [int(state), *ids])

        return self._run(queue, (priority,), work)

    # -- reads -----------------------------------------------------------------
    def count(self, queue: str, priority: int, state: JobState, future: bool) -> int:
        table = job_table(queue, priority)
        if state is JobState.PENDING:
            stmt = sql("count_pending_future" if future else "count_pending_now", table=table)
            return self._run(queue, (priority,), lambda s: int(s.scalar(stmt)))
        stmt = sql("count_state", table=table)
        return self._run(queue, (priority,), lambda s: int(s.scalar(stmt, {"state": int(state)})))

    def scan(
        self,
        queue: str,
        priority: int,
        state: JobState,
        future: bool,
        before: tuple[int, int] | None,
        limit: int,
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord]:
        table = job_table(queue, priority)
        if limit <= 0:
            return []
        name = "scan_state"
        if state is JobState.PENDING:
            name = "scan_pending_future" if future else "scan_pending_now"
        stmt = sql(name, table=table, body=include_body)
        sort_time, local_id = before if before is not None else _CURSOR_TOP
        args = {"state": int(state), "st": sort_time, "id": local_id, "limit": limit}
        within = False
        if include_body and max_body_bytes is not None:
            within = True
            stmt = sql("scan_within", page=stmt)
            args["budget"] = max_body_bytes

        def work(s: Session) -> list[JobRecord]:
            s.execute(stmt, args)
            records = []
            for row in s.fetchall():
                records.append(_record(row, priority))
                if within and row[9] is None:
                    break  # withheld: the page ends here
            return records

        return self._run(queue, (priority,), work)

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
        if include_body and max_body_bytes is not None:
            stmt = sql("lookup_within", table=table, ids=len(ids))
            args = [max_body_bytes, *ids, *ids]
        else:
            stmt = sql("lookup", table=table, ids=len(ids), body=include_body)

        def work(s: Session) -> dict[int, JobRecord]:
            s.execute(stmt, args)
            return {int(row[0]): _record(row, priority) for row in s.fetchall()}

        found = self._run(queue, (priority,), work)
        return [found.get(int(i)) for i in local_ids]
