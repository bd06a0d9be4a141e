"""PyMySQL connections for the MySQL shard backend and control store: the
store's address, a small thread-safe pool (over ``pinlater.kit.dbpool``)
and its retries; the errors are classified in ``errors``."""

from __future__ import annotations

import contextlib
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import pymysql
from pymysql.connections import Connection
from pymysql.constants import CLIENT
from pymysql.cursors import Cursor

from pinlater.errors import PinLaterError
from pinlater.kit.dbpool import PoolCore, close_quietly
from pinlater.kit.tls import ClientTls
from pinlater.stores.base import ShardOutcomeUnknown, ShardUnavailable
from pinlater.stores.mysql.errors import (
    ACCESS_DENIED,
    LOCK_CONFLICT,
    LOCK_RETRIES,
    LOST_DURING_QUERY,
    NO_SUCH_TABLE,
    UNKNOWN_DATABASE,
    MySQLStorageError,
    describe,
    error_code,
    is_foreign,
    is_unreachable,
    storage_error,
)
from pinlater.stores.mysql.statements import sql
from pinlater.stores.mysql.url import MySQLUrl, mysql_connect_options

T = TypeVar("T")

# ``ConnectionPool.run``'s transaction that the work's own texts begin and commit.
INLINE: Final = "inline"
Transaction = bool | Literal["inline"]
_DATABASE = re.compile(r"[A-Za-z0-9_]{1,64}")


class _OneLine(Exception):
    """A cause already described in one line."""


class _Unsent(Exception):
    """``error``, met opening a connection for a unit of work."""

    def __init__(self, error: PinLaterError) -> None:
        super().__init__(error)
        self.error = error


# Idempotent DDL (``prepare``'s, a queue's tables) sent again after the
# server went silent running it: DDL is what a slow disk slows most.
DDL_RESENDS = 2


class LockRetry:
    """Whether one call sends its work again after a lock conflict: a
    deadlock (found at once) up to LOCK_RETRIES times, but not once the call
    has spent its time budget (the store timeout). A lock wait timeout alone
    takes 0.6 of the budget: a call waits on locks twice at most (about 1.2
    timeouts), not five times (3)."""

    def __init__(self, budget_s: float) -> None:
        self._budget_s = budget_s
        self._started = time.monotonic()
        self._attempt = 0

    def again(self, exc: BaseException) -> bool:
        """After ``exc``: True (having backed off) if the work is to be sent again."""
        if error_code(exc) not in LOCK_CONFLICT:
            return False
        self._attempt += 1
        if self._attempt > LOCK_RETRIES or time.monotonic() - self._started >= self._budget_s:
            return False
        time.sleep(random.uniform(0.005, 0.02) * self._attempt)
        return True


@dataclass(frozen=True, slots=True)
class MySQLAddress:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    # The CA (and client certificate) of a TLS connection; None: plain TCP.
    tls: ClientTls | None = None

    @classmethod
    def parse(cls, url: str) -> MySQLAddress:
        """``mysql://user:password@host:port/database[?ssl_ca=...&ssl_cert=...&ssl_key=...]``."""
        parsed = MySQLUrl.parse(url)
        if not _DATABASE.fullmatch(parsed.database):
            raise ValueError(f"MySQL URL needs a database name of [A-Za-z0-9_]: {parsed.database[:80]!r}")
        return cls(
            host=parsed.host or "127.0.0.1",
            port=parsed.port,
            user=parsed.user,
            password=parsed.password,
            database=parsed.database,
            tls=parsed.tls,
        )

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.database}"


class Session:
    """One connection's cursor for one unit of work."""

    def __init__(self, cursor: Cursor, in_transaction: bool, budget_s: float) -> None:
        self._cursor = cursor
        self._in_transaction = in_transaction
        self._budget_s = budget_s
        # An inline transaction (``ConnectionPool.run``): its COMMIT sent, and answered.
        self.committing = self.committed = False

    def execute(self, stmt: str, args: Sequence[Any] | Mapping[str, Any] | None = None) -> int:
        """Run one statement; the row count (matched rows for UPDATE)."""
        retry = LockRetry(self._budget_s)
        while True:
            try:
                return self._cursor.execute(stmt, args)
            except pymysql.err.OperationalError as exc:
                # Inside a transaction the whole transaction is retried instead
                # (a deadlock has rolled all of it back).
                if self._in_transaction or not retry.again(exc):
                    raise

    def execute_script(self, text: str, args: Sequence[Any]) -> list[tuple[tuple[Any, ...], ...]]:
        """Several statements, or one compound statement, in one round trip
        (the connection allows multi-statements): the rows of each result
        set, in order. The text brackets its own transaction; on any error it is
        rolled back here (the pooled connection must not keep it open),
        and after a deadlock or lock wait timeout run again."""
        return self._script(lambda: self.execute_results(text, args))

    def execute_script_ids(self, text: str, args: Sequence[Any]) -> list[int]:
        """``execute_script`` of statements that return no rows, answering
        each one's insert id instead: the first id an INSERT into a table
        with an AUTO_INCREMENT column gave, else 0. A SELECT
        LAST_INSERT_ID() less a statement."""
        return self._script(lambda: self._insert_ids(text, args))

    def _script(self, run: Callable[[], T]) -> T:
        retry = LockRetry(self._budget_s)
        while True:
            try:
                return run()
            except pymysql.err.OperationalError as exc:
                self._roll_back()
                if not retry.again(exc):
                    raise
            except BaseException:
                self._roll_back()
                raise

    def _insert_ids(self, text: str, args: Sequence[Any]) -> list[int]:
        self._cursor.execute(text, args)
        ids = [int(self._cursor.lastrowid or 0)]
        while self._cursor.nextset():
            ids.append(int(self._cursor.lastrowid or 0))
        return ids

    def execute_results(
        self, text: str, args: Sequence[Any] | Mapping[str, Any] | None,
    ) -> list[tuple[tuple[Any, ...], ...]]:
        """Several statements in one round trip, inside the transaction under
        way (the connection allows multi-statements): the rows of each
        result set, in order. An error ends the statements there and is
        the transaction's to handle (rolled back and run again)."""
        self._cursor.execute(text, args)
        results = []
        while True:
            if self._cursor.description is not None:
                results.append(self._cursor.fetchall())
            if not self._cursor.nextset():
                return results

    def render(self, stmt: str, args: Sequence[Any] | Mapping[str, Any]) -> str:
        """One statement with its arguments escaped in, as ``execute`` would
        send it: statements whose arguments differ in kind (named,
        positional) can then share a round trip (``execute_rendered``)."""
        return self._cursor.mogrify(stmt, args)

    def execute_rendered(self, statements: Sequence[str]) -> list[tuple[tuple[Any, ...], ...]]:
        """``execute_results`` of statements ``render`` made (no arguments
        left to fill in)."""
        return self.execute_results(";\n".join(statements), None)

    def begin_results(self, text: str, args: Sequence[Any] | Mapping[str, Any]) -> list[tuple[tuple[Any, ...], ...]]:
        """``execute_results`` of an inline transaction's first text, which
        begins it: one round trip less than a BEGIN of its own."""
        return self.execute_results(f"{sql('begin')};\n{text}", args)

    def commit_results(
        self, text: str, args: Sequence[Any] | Mapping[str, Any], then: str = "",
    ) -> list[tuple[tuple[Any, ...], ...]]:
        """``execute_results`` of an inline transaction's last text, which
        commits it; ``then``: statements the same round trip runs after the
        COMMIT, outside the transaction (reads that need no lock held),
        whose arguments follow the text's."""
        self.committing = True
        results = self.execute_results(f"{text};\n{sql('commit')}" + (f";\n{then}" if then else ""), args)
        self.committed = True
        return results

    def _roll_back(self) -> None:
        # A dead connection has rolled back on the server already.
        with contextlib.suppress(Exception):
            self._cursor.execute(sql("rollback"))

    def fetchall(self) -> tuple[tuple[Any, ...], ...]:
        return self._cursor.fetchall()

    def fetchone(self) -> tuple[Any, ...]:
        row = self._cursor.fetchone()
        if row is None:
            raise pymysql.err.ProgrammingError("statement returned no row")
        return row

    def scalar(self, stmt: str, args: Mapping[str, Any] | None = None) -> Any:
        self.execute(stmt, args)
        return self.fetchone()[0]

    @property
    def lastrowid(self) -> int:
        """LAST_INSERT_ID(): for a multi-row INSERT, the first row's id."""
        return int(self._cursor.lastrowid)


class ConnectionPool:
    """A few idle autocommit connections shared by threads; each unit of work
    borrows one. Connections are opened on demand (a dead server is noticed
    when used, never at construction) and the database is created if it is
    missing. ``prepare`` (idempotent DDL for the owner's own tables) runs
    before the first unit of work and again after ``invalidate_schema``.
    Unreachable-server errors close the connection, drop every idle one and
    are raised as ``unavailable(cause)``; other errors propagate."""

    def __init__(
        self,
        address: MySQLAddress,
        *,
        socket_timeout_s: float,
        prepare: Callable[[Session], None],
        unavailable: Callable[[BaseException], PinLaterError],
        max_idle: int = 8,
    ) -> None:
        self._address = address
        self._timeout = socket_timeout_s
        self._prepare = prepare
        self._prepared = False
        self._unavailable = unavailable
        # Made once (a bad CA file is a ValueError here), shared by every connect.
        self._tls = address.tls.context() if address.tls is not None else None
        self._core: PoolCore[Connection[Cursor]] = PoolCore(
            self._open, ping=lambda conn: conn.ping(), open_failed=self._open_failed, max_idle=max_idle
        )

    def run(self, work: Callable[[Session], T], *, transaction: Transaction = False, resends: int = 0) -> T:
        """``work`` on one connection; with ``transaction``, between BEGIN and
        COMMIT, retried whole after a deadlock or lock wait timeout. With
        ``INLINE``, the work's own texts begin and commit it
        (``Session.begin_results`` and ``commit_results``: two round trips
        less); should it return without committing, it is committed here.
        A database dropped under us is created again (once per call).
        ``resends``: for work that may run twice (idempotent DDL), how many
        times it is sent again when the server went silent while it ran.
        A slow disk or a held lock can make DDL outlast the socket timeout
        and still finish on the server; the resend then finds it done.
        ``prepare`` runs first when due, on its own and with resends of its
        own: the work is not sent until it has run."""
        retry = LockRetry(self._timeout)
        recreated = False
        prepare_resends = DDL_RESENDS
        while True:
            preparing = not self._prepared
            try:
                if preparing:
                    self._run_once(self._prepare_work, False, own_ddl=True)
                    preparing = False
                return self._run_once(work, transaction)
            except _Unsent as unsent:
                # No connection, so nothing of the work was sent: never a case
                # for a resend, whatever error number the attempt to connect met.
                raise unsent.error from unsent.error.__cause__
            except PinLaterError as exc:
                cause = exc.__cause__
                if cause is None or error_code(cause) != LOST_DURING_QUERY:
                    raise
                if preparing and prepare_resends > 0:
                    prepare_resends -= 1
                elif not preparing and resends > 0:
                    resends -= 1
                else:
                    raise
            except pymysql.err.OperationalError as exc:
                if error_code(exc) == UNKNOWN_DATABASE and not recreated:
                    recreated = True
                    self._create_database()
                    continue
                if not transaction or not retry.again(exc):
                    raise storage_error(self._address, exc) from exc
            except pymysql.MySQLError as exc:
                raise storage_error(self._address, exc) from exc

    def _prepare_work(self, s: Session) -> None:
        self._prepare(s)
        self._prepared = True  # racing threads may both prepare: it is idempotent

    def _run_once(self, work: Callable[[Session], T], transaction: Transaction, *, own_ddl: bool = False) -> T:
        """``own_ddl``: the work is ``prepare``'s, none of the caller's, so
        losing it says nothing of what the caller asked for."""
        try:
            conn, generation = self._core.checkout()
        except PinLaterError as exc:
            raise _Unsent(exc) from None
        reusable = committing = False
        session: Session | None = None
        try:
            with conn.cursor() as cursor:
                if transaction is True:
                    conn.begin()
                session = Session(cursor, bool(transaction), self._timeout)
                result = work(session)
                if transaction and not session.committed:
                    committing = True
                    conn.commit()
            reusable = True
            return result
        except Exception as exc:
            committing = committing or (session is not None and session.committing)
            if is_unreachable(exc):
                self.flush()
                error = self._unavailable(_OneLine(describe(exc)))
                if (error_code(exc) == LOST_DURING_QUERY and (committing or not transaction) and not own_ddl
                        and isinstance(error, ShardUnavailable)):
                    # Inside a transaction before its COMMIT the server rolls
                    # it back; an autocommit statement or a COMMIT may stand.
                    error = ShardOutcomeUnknown(f"{error} (lost while it ran: it may have been applied)")
                raise error from exc
            reusable = not transaction or self._rolled_back(conn)
            raise
        finally:
            # Not reusable also after KeyboardInterrupt and the like: the
            # connection may be mid-statement.
            if reusable:
                self._core.checkin(conn, generation)
            else:
                close_quietly(conn)

    @staticmethod
    def _rolled_back(conn: Connection[Cursor]) -> bool:
        try:
            conn.rollback()
            return True
        except Exception:  # noqa: BLE001 -- the original error is the one to report
            return False

    def _open_failed(self, exc: Exception) -> Exception | None:
        if is_unreachable(exc) or is_foreign(exc, connecting=True):
            return self._unavailable(_OneLine(self._describe_refusal(exc)))
        return None

    def _describe_refusal(self, exc: BaseException) -> str:
        text = describe(exc, connecting=True)
        # A server requiring TLS (require_secure_transport) answers a plain
        # client's right password with "access denied" too.
        if error_code(exc) == ACCESS_DENIED and self._tls is None:
            text += "; if the server requires TLS, add ?ssl_ca=CA_FILE to the URL"
        if error_code(exc) == LOST_DURING_QUERY:
            text += " while connecting (no MySQL greeting: a server that does not answer, or not MySQL?)"
        return text

    def _connect(self, with_database: bool) -> Connection[Cursor]:
        a = self._address
        return pymysql.connect(
            host=a.host,
            port=a.port,
            user=a.user,
            password=a.password,
            database=a.database if with_database else None,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=self._timeout,
            read_timeout=self._timeout,
            write_timeout=self._timeout,
            # Row counts of UPDATE are matched rows, not changed rows: a
            # heartbeat within the same millisecond still counts as applied.
            # Multi-statements: a peek is one round trip (Session.execute_script).
            client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
            **mysql_connect_options(self._tls),
        )

    def _open(self) -> Connection[Cursor]:
        try:
            conn = self._connect(with_database=True)
        except pymysql.err.OperationalError as exc:
            if error_code(exc) != UNKNOWN_DATABASE:
                raise
            self._create_database()
            conn = self._connect(with_database=True)
        try:
            with conn.cursor() as cursor:
                session = Session(cursor, in_transaction=False, budget_s=self._timeout)
                session.execute(sql("session_isolation"))
                lock_wait_s = max(1, int(self._timeout * 0.6))
                session.execute(sql("session_setup"), {"lock_wait_s": lock_wait_s})
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    def _create_database(self) -> None:
        """CREATE DATABASE IF NOT EXISTS over a connection without a default
        database; our own tables are then created again by ``prepare``."""
        try:
            bootstrap = self._connect(with_database=False)
        except Exception as exc:
            if is_unreachable(exc) or is_foreign(exc, connecting=True):
                raise self._unavailable(_OneLine(self._describe_refusal(exc))) from exc
            raise
        try:
            with bootstrap.cursor() as cursor:
                cursor.execute(sql("create_database", database=self._address.database))
        except Exception as exc:
            if is_unreachable(exc):
                raise self._unavailable(exc) from exc
            raise
        finally:
            close_quietly(bootstrap)
        self._prepared = False

    def invalidate_schema(self) -> None:
        """Run ``prepare`` again before the next unit of work (one of our own
        tables has gone missing)."""
        self._prepared = False

    def flush(self) -> None:
        """Close every idle connection; ones in use are closed when returned."""
        self._core.flush()

    def close(self) -> None:
        self.flush()


def run_creating_missing_tables(
    pool: ConnectionPool,
    work: Callable[[Session], T],
    *,
    transaction: Transaction = False,
    create: Callable[[], None] | None = None,
    resends: int = 0,
) -> T:
    """``work`` on ``pool``; should a table be missing (MySQL error 1146),
    the pool's own tables are prepared again, ``create`` makes any others
    the work needs, and the work runs once more. ``resends`` as for
    ``ConnectionPool.run``."""
    try:
        return pool.run(work, transaction=transaction, resends=resends)
    except MySQLStorageError as exc:
        if error_code(exc) != NO_SUCH_TABLE:
            raise
    pool.invalidate_schema()
    if create is not None:
        create()
    return pool.run(work, transaction=transaction, resends=resends)
