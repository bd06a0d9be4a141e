"""A MySQL shard's connection: its pool, the layout check on each new
session, and ``_run``, through which every statement of the shard's parts
(``claims`` and the writes in ``shard``) runs, creating a queue's missing
tables once, and ``_read``, through which ``reads`` run and create nothing."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Self, TypeVar

import pymysql

from pinlater.errors import QueueDeleted, StorageError
from pinlater.kit.sqlblocks import job_table, job_table_parts
from pinlater.stores.base import ShardUnavailable
from pinlater.stores.mysql.errors import (
    NO_SUCH_DEFINER,
    NO_SUCH_TABLE,
    NO_TRIGGER_PRIVILEGE,
    MySQLStorageError,
    describe,
    error_code,
)
from pinlater.stores.mysql.layout import MYSQL_SHARD, check_mysql_layout
from pinlater.stores.mysql.pool import (
    DDL_RESENDS,
    ConnectionPool,
    MySQLAddress,
    Session,
    Transaction,
    run_creating_missing_tables,
)
from pinlater.stores.mysql.statements import LAYOUT_SQL, sql

T = TypeVar("T")
log = logging.getLogger(__name__)

QUEUE_LOCK_WAIT_S = 30  # a queue's tables being dropped: seconds at most, even for a big queue
TRACE_LAYOUT = 4  # the layout from which job tables have the trace column
KEY_LAYOUT = 5  # ... and the fkey column (fairness keys; before it, keys are not stored)
UNIQUE_TRIGGER_LAYOUT = 7  # ... and the ukey column with its trigger (unique keys in one statement)
# The store's id (``store_id``): a row of pinlater_meta of its own.
STORE_ID = {"name": "store_id"}
PROBE_ROW = "pinlater probe"  # the prober's row in ``queues`` (never kept): no queue name has a space


@contextlib.contextmanager
def queue_lock(s: Session, queue: str) -> Iterator[None]:
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



class ShardConnection:
    """A MySQL shard's pool and the one way its statements run (``_run``),
    which every part of ``MySQLBackend`` (claims, reads, writes) shares."""

    def __init__(self, shard_id: str, address: MySQLAddress, socket_timeout_s: float = 5.0) -> None:
        self.shard_id = shard_id
        self._address = address
        # Filled on the first connection: how AUTO_INCREMENT hands out ids.
        self._autoinc_lock_mode: int | None = None
        self._autoinc_step = 1
        self._traces = False
        self._keys = False
        self._unique_trigger = False
        self._triggers_refused = False  # the account may not make triggers
        # (queue, priority) whose last dequeue met keyed lanes: the next goes
        # to them at once (``LanesMixin``), one round trip less.
        self._lanes_seen: set[tuple[str, int]] = set()
        # (queue, priority) whose last dequeue by lanes met newcomers: the
        # next sends their admission in its first round trip.
        self._newcomers_seen: set[tuple[str, int]] = set()
        self._pool = ConnectionPool(
            address,
            socket_timeout_s=socket_timeout_s,
            prepare=self._prepare,
            unavailable=self._unavailable,
        )

    @classmethod
    def from_url(cls, shard_id: str, url: str, socket_timeout_s: float = 5.0) -> Self:
        return cls(shard_id, MySQLAddress.parse(url), socket_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shard_id!r}, {self._address})"

    def _unavailable(self, cause: BaseException) -> ShardUnavailable:
        where = f"shard {self.shard_id} (mysql {self._address})"
        return ShardUnavailable(f"{where} unavailable: {cause}")

    def _prepare(self, s: Session) -> None:
        layout = check_mysql_layout(s, MYSQL_SHARD, f"shard {self.shard_id} (mysql {self._address})")
        # Job tables have the trace column from layout 4 on.
        self._traces = layout >= TRACE_LAYOUT
        self._keys = layout >= KEY_LAYOUT
        self._unique_trigger = layout >= UNIQUE_TRIGGER_LAYOUT and not self._triggers_refused
        s.execute(sql("create_queues_table"))
        s.execute(sql("create_deleted_queues_table"))
        for table in ("create_lanes_table", "create_lane_jobs_table", "create_fair_table", "create_unique_table"):
            s.execute(sql(table))
        s.execute(sql("server_autoinc"))
        row = s.fetchone()
        self._autoinc_lock_mode, self._autoinc_step = int(row[0]), int(row[1])

    def _run(
        self,
        queue: str | None,
        priorities: Iterable[int],
        work: Callable[[Session], T],
        transaction: Transaction = False,
        resends: int = 0,
    ) -> T:
        """Run ``work``. A missing table (the queue was created while this
        shard was down, or the database was recreated) is created and the
        work retried once: the queue's tables for ``priorities``, and the
        ``queues`` table; but not those of a queue deleted here
        (QueueDeleted). ``resends`` as for ``ConnectionPool.run``."""

        def create() -> None:
            if queue is not None:
                self._create_tables(queue, sorted(set(priorities)), revive=False)

        def run() -> T:
            return run_creating_missing_tables(self._pool, work, transaction=transaction, create=create,
                                               resends=resends)

        try:
            return run()
        except MySQLStorageError as exc:
            if queue is None or error_code(exc) != NO_SUCH_DEFINER:
                raise
            gone = exc
        # The account that made a table's trigger was dropped (credentials
        # rotated): the statement failed whole, so it runs again once the
        # triggers are this account's, if it may make them.
        try:
            self._remake_triggers(queue, sorted(set(priorities)))
        except MySQLStorageError as exc:
            if error_code(exc) in NO_TRIGGER_PRIVILEGE:
                raise gone from exc
            raise
        return run()

    def _read(self, work: Callable[[Session], T], missing: T) -> T:
        """Run ``work``, a read of one job table: ``missing`` if the table
        is not there. A queue's table that was never made holds no jobs,
        and a read (a dashboard pass over every queue) must not make it."""
        try:
            return self._pool.run(work)
        except MySQLStorageError as exc:
            if error_code(exc) != NO_SUCH_TABLE:
                raise
            return missing

    def _create_tables(self, queue: str, priorities: Sequence[int], *, revive: bool) -> None:
        """The queue's tables for ``priorities``. ``revive``: lift a
        deletion of the queue here (create_queue); otherwise a queue
        deleted here raises QueueDeleted and gets no tables."""
        tables = [job_table(queue, p) for p in priorities]
        name = {"name": queue}

        # The queues and deleted_queues tables are the pool's own (``_prepare``):
        # should either be missing, the retry in ``_run`` makes them and runs this again.
        def work(s: Session) -> None:
            with queue_lock(s, queue):
                if revive:
                    s.execute(sql("unmark_queue_deleted"), name)
                elif s.scalar(sql("queue_deleted"), name):
                    raise QueueDeleted(queue, self.shard_id)
                for table in tables:
                    s.execute(sql("create_job_table", table=table))
                self._arm_unique(s, queue, tables)
                s.execute(sql("register_queue"), {"name": queue, "priorities": max(priorities)})

        self._run(None, (), work, resends=DDL_RESENDS)  # all of it may run twice

    def _arm_unique(self, s: Session, queue: str, tables: Sequence[str]) -> None:
        """Of ``tables``, those still refusing unique keys (made just now,
        or by a process that died before this): their trigger made, then
        the refusal lifted. Tables of older code, without the ukey column,
        have no refusal to lift and get no trigger. An account that may not
        make triggers leaves the refusal, and this process takes keys the
        two-statement way from then on."""
        s.execute(sql("unique_unarmed", ids=len(tables)), list(tables))
        for (table,) in s.fetchall():
            _, priority = job_table_parts(str(table))
            try:
                s.execute(sql("unique_trigger", table=str(table), queue=queue, priority=priority))
            except pymysql.MySQLError as exc:
                if error_code(exc) not in NO_TRIGGER_PRIVILEGE:
                    raise
                if not self._triggers_refused:
                    log.warning("shard %s (mysql %s) may not make triggers (%s): unique keys take two statements",
                                self.shard_id, self._address, describe(exc))
                self._triggers_refused = True
                self._unique_trigger = False
                return
            s.execute(sql("unique_armed", table=str(table)))

    def _remake_triggers(self, queue: str, priorities: Sequence[int]) -> None:
        """The triggers of the queue's tables for ``priorities``, made again
        as this account (none is seen by an account without the TRIGGER
        privilege)."""
        tables = [job_table(queue, p) for p in priorities]

        def work(s: Session) -> int:
            with queue_lock(s, queue):
                s.execute(sql("unique_triggered", ids=len(tables)), tables)
                found = [str(row[0]) for row in s.fetchall()]
                for table in found:
                    _, priority = job_table_parts(table)
                    s.execute(sql("unique_trigger", table=table, queue=queue, priority=priority))
            return len(found)

        if self._pool.run(work, resends=DDL_RESENDS):
            log.warning("shard %s (mysql %s): the account that made the triggers of queue %s is gone; made again",
                        self.shard_id, self._address, queue)

    def _learn_layout(self) -> None:
        """Before a statement is written for the store's layout (its columns
        from layout 4 and 5 on): the first connection learns it."""
        if self._autoinc_lock_mode is None:
            self.ping()

    # -- housekeeping ------------------------------------------------------
    def ping(self) -> None:
        self._pool.run(lambda s: s.execute(sql("ping")))

    def probe(self) -> None:
        run_creating_missing_tables(self._pool, lambda s: s.execute_script(sql("probe"), [PROBE_ROW]))

    def store_id(self) -> str:
        def work(s: Session) -> str:
            s.execute(LAYOUT_SQL("meta_read"), STORE_ID)
            found = s.fetchall()
            if not found:  # a new store: the first to ask names it
                s.execute(LAYOUT_SQL("meta_stamp"), {**STORE_ID, "version": secrets.randbelow(2**31 - 1) + 1})
                s.execute(LAYOUT_SQL("meta_read"), STORE_ID)
                found = s.fetchall()
            return str(found[0][0])

        def make_meta() -> None:  # a store of the first layout has no pinlater_meta yet
            self._pool.run(lambda s: s.execute(LAYOUT_SQL("meta_create")))

        return run_creating_missing_tables(self._pool, work, create=make_meta)

    def now_ms(self) -> int:
        return self._pool.run(lambda s: int(s.scalar(sql("now"))))

    def close(self) -> None:
        self._pool.close()
