"""The MySQL (MariaDB) shard: one database per shard, one InnoDB table per
(queue, priority), every statement from ``sql/mysql.sql``. Claims are in
``claims``, reads in ``reads``; writes and housekeeping here.

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
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from pinlater.errors import QueueDeleted, StorageError
from pinlater.kit.sqlblocks import MAX_PRIORITY, job_table
from pinlater.states import JobState
from pinlater.stores.base import (
    EnqueueItem,
    ShardUnavailable,
)
from pinlater.stores.mysql.claims import ClaimsMixin
from pinlater.stores.mysql.layout import MYSQL_SHARD, check_mysql_layout
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session, run_creating_missing_tables
from pinlater.stores.mysql.reads import ReadsMixin
from pinlater.stores.mysql.statements import sql

T = TypeVar("T")

QUEUE_LOCK_WAIT_S = 30  # a queue's tables being dropped: seconds at most, even for a big queue
TRACE_LAYOUT = 4  # the layout from which job tables have the trace column
INSERT_CHUNK_BYTES = 4 << 20  # well under MariaDB's default 16 MB max_allowed_packet
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
