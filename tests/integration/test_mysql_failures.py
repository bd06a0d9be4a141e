"""How the MySQL backend and control store meet failures: an unreachable
server, killed connections, missing tables, a dropped database, lock
conflicts. Against the real MariaDB of ``scripts/services`` (started if
needed), in a throwaway database."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from pinlater.errors import ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState
from pinlater.stores.base import EnqueueItem, ScanQuery, ShardOutcomeUnknown, ShardUnavailable
from pinlater.stores.mysql.control import MySQLControlStore
from pinlater.stores.mysql.errors import MySQLStorageError
from pinlater.stores.mysql.pool import INLINE, ConnectionPool, MySQLAddress, Session
from pinlater.stores.mysql.shard import MySQLBackend
from pinlater.stores.mysql.statements import sql
from tests.integration.mysql_support import raw_connection as _raw
from tests.servers import mysql_url

P = JobState.PENDING


def item(priority: int = 1) -> EnqueueItem:
    return EnqueueItem(b"body", priority, None, 3, "")


def one(b: MySQLBackend, q: str) -> int:
    return b.enqueue(q, [item()])[0]


def test_unreachable_server_raises_shard_unavailable() -> None:
    b = MySQLBackend.from_url("dead7", "mysql://u:p@127.0.0.1:1/x", socket_timeout_s=1.0)
    with pytest.raises(ShardUnavailable) as info:
        b.ping()
    assert "dead7" in str(info.value)
    assert isinstance(info.value.__cause__, pymysql.err.OperationalError)
    with pytest.raises(ShardUnavailable):
        b.enqueue("q", [item()])
    c = MySQLControlStore.from_url("mysql://u:p@127.0.0.1:1/x", socket_timeout_s=1.0)
    with pytest.raises(ShardConnectionFailed):
        c.get_queue("q")


def test_a_connection_lost_while_a_write_ran_may_have_applied(
    backend: MySQLBackend, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost while an autocommit INSERT or a COMMIT ran: the
    write may stand (here it did), so ``ShardOutcomeUnknown``, and an
    enqueue is not sent to another shard too. Lost inside a transaction
    before its COMMIT, the server rolls it back: plainly unavailable."""
    one(backend, queue)
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query (timed out)")
    real_execute, real_commit = pymysql.cursors.Cursor.execute, pymysql.connections.Connection.commit

    def execute_then_lose(cursor: pymysql.cursors.Cursor, query: str, args: object = None) -> int:
        done = real_execute(cursor, query, args)
        if query.lstrip().upper().startswith("INSERT"):
            raise lost
        return done

    def commit_then_lose(conn: pymysql.connections.Connection) -> None:
        real_commit(conn)
        raise lost

    two = [item(1), item(2)]  # two statements: one transaction
    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", execute_then_lose)
    with pytest.raises(ShardOutcomeUnknown, match="it may have been applied"):
        one(backend, queue)  # one statement, autocommit
    with pytest.raises(ShardUnavailable) as inside:
        backend.enqueue(queue, two)
    assert not isinstance(inside.value, ShardOutcomeUnknown)
    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", real_execute)
    monkeypatch.setattr(pymysql.connections.Connection, "commit", commit_then_lose)
    with pytest.raises(ShardOutcomeUnknown, match="it may have been applied"):
        backend.enqueue(queue, two)
    monkeypatch.undo()
    # The first, the autocommit one and the committed pair; not the rolled-back pair.
    assert [backend.count(queue, p, P, False) for p in (1, 2)] == [3, 1]


def test_killed_connections_are_replaced(
    backend: MySQLBackend, queue: str, database: str
) -> None:
    one(backend, queue)
    backend.ping()
    conn = _raw()
    with conn.cursor() as cur:
        # Only this test's own database: other suites may be running.
        cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s", (database,))
        for (pid,) in cur.fetchall():
            cur.execute("KILL CONNECTION %s", (pid,))
    conn.close()
    failures = 0
    for _ in range(3):
        try:
            assert backend.count(queue, 1, P, False) == 1
        except ShardUnavailable:
            failures += 1  # at most the one call that met the dead connection
    assert failures <= 1
    assert backend.count(queue, 1, P, False) == 1


def test_a_database_dropped_under_a_live_backend_comes_back(database: str) -> None:
    name = f"{database}_gone"
    b = MySQLBackend.from_url("d3", mysql_url(name), socket_timeout_s=5.0)
    c = MySQLControlStore.from_url(mysql_url(name), socket_timeout_s=5.0)
    try:
        b.create_queue("q1", 1)
        c.put_queue(QueueConfig("q1"))
        conn = _raw()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {name}")
        conn.close()
        assert b.enqueue("q1", [item()]) == [1]
        assert "q1" in b.queue_names()
        assert c.get_queue("q1") is None
        assert c.create_queue(QueueConfig("q1")) is True
    finally:
        b.close()
        c.close()
        conn = _raw()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.close()


def test_a_missing_table_is_created_on_first_use(
    backend: MySQLBackend, queue: str, database: str
) -> None:
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE q_{queue}_p2")
        cur.execute(f"DROP TABLE q_{queue}_p3")
        cur.execute("DELETE FROM queues WHERE name = %s", (queue,))
    conn.close()
    assert backend.enqueue(queue, [item(priority=2)]) == [1]
    assert backend.dequeue(queue, [3], 10, "w1").jobs == []
    assert backend.count(queue, 3, P, False) == 0
    assert queue in backend.queue_names()
    fresh = f"t_{uuid.uuid4().hex[:12]}"  # never created on this shard
    assert backend.enqueue(fresh, [item(priority=3)]) == [1]
    assert fresh in backend.queue_names()


STALL_TIMEOUT_S = 1.0  # the stalled backend's socket timeout


@contextlib.contextmanager
def _stalled(database: str, statement: str, args: dict[str, object] | None = None) -> Iterator[None]:
    """Another session runs ``statement`` (a lock it then holds) and ends
    1.5 socket timeouts later, ending the stall: past one timeout of the
    stalled backend, within its resends."""
    holder = _raw(database)
    release = threading.Timer(1.5 * STALL_TIMEOUT_S, holder.close)
    try:
        with holder.cursor() as cur:
            cur.execute(statement, args)
        release.start()
        started = time.monotonic()
        yield
        assert time.monotonic() - started >= STALL_TIMEOUT_S  # the first send did time out
    finally:
        release.cancel()
        release.join()
        if holder.open:
            holder.close()


def test_a_queue_made_while_the_server_stalls_past_the_timeout_is_made_by_a_resend(database: str) -> None:
    """Making a queue's tables can outlast the socket timeout (a slow disk
    under DDL, or its lock held by a delete of the queue) and still finish
    on the server: it is sent again, no shard is reported lost, and the
    queue is whole. The stall here is the queue's lock, held by another
    session for longer than the backend's timeout."""
    b = MySQLBackend.from_url("d4", mysql_url(database), socket_timeout_s=STALL_TIMEOUT_S)
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        b.ping()  # the database and the pool's own tables made first: only the queue's DDL stalls
        with _stalled(database, sql("lock_queue"), {"name": name, "timeout": 1}):
            b.create_queue(name, 2)
        assert name in b.queue_names()
        assert b.enqueue(name, [item(priority=2)]) == [1]
    finally:
        b.close()


def test_a_backends_own_ddl_stalled_past_the_timeout_is_sent_again_before_its_first_call(database: str) -> None:
    """A backend makes its own tables before its first unit of work; that
    DDL too can outlast the socket timeout and finish on the server. It is
    sent again, and the call it came before is sent once, after it, and
    answers. The stall here is another session's lock on one of those
    tables, held for longer than the backend's timeout."""
    first = MySQLBackend.from_url("d5", mysql_url(database), socket_timeout_s=5.0)
    name = f"t_{uuid.uuid4().hex[:12]}"
    first.create_queue(name, 1)  # the database, its own tables and a queue, made first
    first.close()
    b = MySQLBackend.from_url("d5", mysql_url(database), socket_timeout_s=STALL_TIMEOUT_S)
    try:
        with _stalled(database, "LOCK TABLES queues WRITE"):
            assert b.enqueue(name, [item()]) == [1]  # not an outcome unknown: it was sent once, after the DDL
        assert b.count(name, 1, P, False) == 1
    finally:
        b.close()


def test_reads_of_a_queue_whose_tables_are_missing_find_nothing_and_make_nothing(
    backend: MySQLBackend, queue: str, database: str
) -> None:
    # The shard was down when the queue was made: a dashboard pass over
    # every queue must not make their tables, one statement each.
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE q_{queue}_p2")
    assert backend.count(queue, 2, P, False) == 0
    assert backend.count(queue, 2, JobState.FAILED, False) == 0
    assert backend.scan(ScanQuery(queue, 2, P, limit=10)) == []
    assert backend.lookup(queue, 2, [1, 2], include_body=True) == [None, None]
    with conn.cursor() as cur:
        cur.execute("SHOW TABLES LIKE %s", (f"q_{queue}_p2",))
        assert cur.fetchall() == ()
    conn.close()
    assert backend.enqueue(queue, [item(priority=2)]) == [1]  # a write makes it
    assert backend.count(queue, 2, P, False) == 1


def test_lock_conflicts_are_retried_then_raised() -> None:
    class Flaky:
        def __init__(self, failures: int) -> None:
            self.failures = failures
            self.calls = 0

        def execute(self, query: str, args: object = None) -> int:
            self.calls += 1
            if self.calls <= self.failures:
                raise pymysql.err.OperationalError(1213, "Deadlock found")
            return 7

    ok = Flaky(2)
    assert Session(ok, in_transaction=False, budget_s=5.0).execute("UPDATE x") == 7  # type: ignore[arg-type]
    assert ok.calls == 3
    hopeless = Flaky(100)
    with pytest.raises(pymysql.err.OperationalError):
        Session(hopeless, in_transaction=False, budget_s=5.0).execute("UPDATE x")  # type: ignore[arg-type]
    in_txn = Flaky(1)  # the whole transaction is retried instead, by the pool
    with pytest.raises(pymysql.err.OperationalError):
        Session(in_txn, in_transaction=True, budget_s=5.0).execute("UPDATE x")  # type: ignore[arg-type]
    assert hopeless.calls == 5  # the first send and LOCK_RETRIES more


@pytest.mark.parametrize("transaction", [True, False])
def test_a_held_row_lock_costs_a_call_about_one_store_timeout(database: str, transaction: bool) -> None:
    """A row another session keeps locked: each try waits out the lock wait
    (0.6 of the store timeout, at least 1 s), and the call stops sending
    once it has used its timeout, so it fails with 1205 after two waits,
    not five (2.6 timeouts more)."""
    timeout_s = 2.0
    pool = ConnectionPool(MySQLAddress.parse(mysql_url(database)), socket_timeout_s=timeout_s,
                          prepare=lambda s: None, unavailable=lambda cause: ShardUnavailable(str(cause)))
    pool.run(lambda s: s.execute("SELECT 1"))  # the database made, if this test runs first
    holder = _raw(database)
    try:
        with holder.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS locked_t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
            cur.execute("INSERT IGNORE INTO locked_t VALUES (1, 0)")
            holder.commit()
            holder.begin()
            cur.execute("SELECT v FROM locked_t WHERE id = 1 FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(MySQLStorageError) as info:
            pool.run(lambda s: s.execute("UPDATE locked_t SET v = v + 1 WHERE id = 1"), transaction=transaction)
        took = time.monotonic() - started
        assert info.value.errno == 1205, info.value
        assert 1.9 <= took < 1.75 * timeout_s, f"a held lock cost the call {took:.1f} s"
    finally:
        holder.close()
        pool.close()


def _inline_pool(database: str) -> ConnectionPool:
    def prepare(s: Session) -> None:
        s.execute("CREATE TABLE IF NOT EXISTS inline_t (id INT PRIMARY KEY) ENGINE=InnoDB")

    return ConnectionPool(MySQLAddress.parse(mysql_url(database)), socket_timeout_s=5.0, prepare=prepare,
                          unavailable=lambda cause: ShardUnavailable(str(cause)))


def _ids(database: str) -> list[int]:
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM inline_t ORDER BY id")
        rows = [int(r[0]) for r in cur.fetchall()]
    conn.close()
    return rows


def test_inline_transactions_commit_roll_back_and_report_a_lost_commit(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An INLINE transaction's texts begin and commit it themselves: what
    one leaves uncommitted is committed by the pool; an error rolls it back
    and the connection is fit for the next caller; a connection lost while
    the committing text ran may have committed (ShardOutcomeUnknown), one
    lost while the first ran has not."""
    pool = _inline_pool(database)
    try:
        def committed(s: Session) -> None:
            s.begin_results("INSERT INTO inline_t VALUES (1)", [])
            assert s.commit_results("SELECT 1", []) == [((1,),)]

        pool.run(committed, transaction=INLINE)
        pool.run(lambda s: s.begin_results("INSERT INTO inline_t VALUES (2)", []), transaction=INLINE)
        assert _ids(database) == [1, 2]

        def fails(s: Session) -> None:
            s.begin_results("INSERT INTO inline_t VALUES (3)", [])
            raise RuntimeError("work failed")

        with pytest.raises(RuntimeError, match="work failed"):
            pool.run(fails, transaction=INLINE)
        pool.run(lambda s: s.execute("INSERT INTO inline_t VALUES (4)"))  # autocommit: no transaction left open
        assert _ids(database) == [1, 2, 4]

        lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query (timed out)")
        real_execute = pymysql.cursors.Cursor.execute

        def lose_at(word: str):  # type: ignore[no-untyped-def]
            def execute(cursor: pymysql.cursors.Cursor, query: str, args: object = None) -> int:
                done = real_execute(cursor, query, args)
                if word in query:
                    raise lost
                return done
            return execute

        def both(s: Session) -> None:
            s.begin_results("INSERT INTO inline_t VALUES (5)", [])
            s.commit_results("INSERT INTO inline_t VALUES (6)", [])

        monkeypatch.setattr(pymysql.cursors.Cursor, "execute", lose_at("COMMIT"))
        with pytest.raises(ShardOutcomeUnknown, match="it may have been applied"):
            pool.run(both, transaction=INLINE)
        monkeypatch.setattr(pymysql.cursors.Cursor, "execute", lose_at("VALUES (7)"))
        with pytest.raises(ShardUnavailable) as first:
            pool.run(lambda s: s.begin_results("INSERT INTO inline_t VALUES (7)", []), transaction=INLINE)
        assert not isinstance(first.value, ShardOutcomeUnknown)
        monkeypatch.undo()
        # The lost commit did commit here (the server had it); the other did not.
        assert _ids(database) == [1, 2, 4, 5, 6]
    finally:
        pool.close()
