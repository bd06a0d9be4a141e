"""PyMySQL connections for the MySQL shard backend and control store: DSN
parsing, a small thread-safe pool, error classification and retries."""

from __future__ import annotations

import contextlib
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymysql
from pymysql.connections import Connection
from pymysql.constants import CLIENT
from pymysql.cursors import Cursor

from pinlater.backends.base import ShardWriteRefused
from pinlater.errors import PinLaterError, StorageError
from pinlater.kit.sqlblocks import sql
from pinlater.kit.tls import ClientTls
from pinlater.storage.urls import MySQLUrl, mysql_connect_options

T = TypeVar("T")

# Errors meaning "the server cannot be reached": can't connect (2002, 2003),
# gone away (2006), lost connection (2013, 2055), shutdown in progress
# (1053), connection killed (1927).
UNREACHABLE = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055})
# The server answers but will not let us in (wrong credentials, host not
# allowed, too many connections): as unusable as a server that is down.
REFUSED = frozenset({1040, 1044, 1045, 1129, 1130, 1698})
# Lost a deadlock (1213) or waited too long for a lock (1205): nothing was
# changed, running it again is safe.
LOCK_CONFLICT = frozenset({1205, 1213})
# The server answers but will not write: read-only (1290 for --read-only,
# 1836 read-only mode, 1036 a read-only table, as under innodb_read_only),
# out of space (1114 table full, 1021 disk full).
WRITE_REFUSED = frozenset({1021, 1036, 1114, 1290, 1836})
LOCK_RETRIES = 4
NO_SUCH_TABLE = 1146
ACCESS_DENIED = 1045
UNKNOWN_DATABASE = 1049
# A connection idle for longer is pinged before use: after a server restart
# every pooled connection is dead, and a ping (unlike a statement) is safe
# to fail and replace.
IDLE_PING_S = 2.0

_DATABASE = re.compile(r"[A-Za-z0-9_]{1,64}")


class MySQLStorageError(StorageError):
    """A MySQL error that is not a connection failure, as the job service
    reports it: one line, with the server's error number kept in ``errno``."""

    def __init__(self, message: str, errno: int | None) -> None:
        super().__init__(message)
        self.errno = errno


class MySQLWriteRefused(MySQLStorageError, ShardWriteRefused):
    """A MySQL error of ``WRITE_REFUSED``: nothing was written."""


def storage_error(where: object, exc: BaseException) -> MySQLStorageError:
    """PyMySQL's error as the job service reports it, naming ``where``."""
    code = error_code(exc)
    if code in WRITE_REFUSED:
        return MySQLWriteRefused(f"{where} refuses writes: {describe(exc)}", code)
    return MySQLStorageError(f"{where}: {describe(exc)}", code)


def error_code(exc: BaseException) -> int | None:
    if isinstance(exc, MySQLStorageError):
        return exc.errno
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_unreachable(exc: BaseException) -> bool:
    # PyMySQL raises InterfaceError for a connection it already knows is dead.
    if isinstance(exc, pymysql.err.InterfaceError | OSError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and error_code(exc) in UNREACHABLE | REFUSED


def is_foreign(exc: BaseException) -> bool:
    """Not a MySQL error at all while connecting: PyMySQL choking on what
    another kind of server (Redis, HTTP...) sent back."""
    return not isinstance(exc, pymysql.MySQLError | PinLaterError)


def describe(exc: BaseException) -> str:
    """One line for an error of PyMySQL's."""
    code = error_code(exc)
    args: tuple[object, ...] = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    if is_foreign(exc):
        return f"not a MySQL server? ({type(exc).__name__}: {exc})"
    return f"MySQL error {code}: {text}" if code is not None else f"{type(exc).__name__}: {text}"


class _OneLine(Exception):
    """A cause already described in one line."""


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0.005, 0.02) * attempt)


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

    def __init__(self, cursor: Cursor, in_transaction: bool) -> None:
        self._cursor = cursor
        self._in_transaction = in_transaction

    def execute(self, stmt: str, args: Sequence[Any] | Mapping[str, Any] | None = None) -> int:
        """Run one statement; the row count (matched rows for UPDATE)."""
        attempt = 0
        while True:
            try:
                return self._cursor.execute(stmt, args)
            except pymysql.err.OperationalError as exc:
                # Inside a transaction the whole transaction is retried instead
                # (a deadlock has rolled all of it back).
                if self._in_transaction or error_code(exc) not in LOCK_CONFLICT:
                    raise
                attempt += 1
                if attempt > LOCK_RETRIES:
                    raise
                _backoff(attempt)

    def execute_script(self, text: str, args: Sequence[Any]) -> list[tuple[tuple[Any, ...], ...]]:
        """Several statements, or one compound statement, in one round trip
        (the connection allows multi-statements): the rows of each result
        set, in order. The text brackets its own transaction; on any error it is
        rolled back here (the pooled connection must not keep it open),
        and after a deadlock or lock wait timeout run again."""
        attempt = 0
        while True:
            try:
                self._cursor.execute(text, args)
                results = []
                while True:
                    if self._cursor.description is not None:
                        results.append(self._cursor.fetchall())
                    if not self._cursor.nextset():
                        return results
            except pymysql.err.OperationalError as exc:
                self._roll_back()
                attempt += 1
                if error_code(exc) not in LOCK_CONFLICT or attempt > LOCK_RETRIES:
                    raise
                _backoff(attempt)
            except BaseException:
                self._roll_back()
                raise

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
        self._max_idle = max_idle
        self._idle: queue.LifoQueue[tuple[Connection[Cursor], int, float]] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._generation = 0  # bumped by flush(): older connections are not reused
        # Made once (a bad CA file is a ValueError here), shared by every connect.
        self._tls = address.tls.context() if address.tls is not None else None

    def run(self, work: Callable[[Session], T], *, transaction: bool = False) -> T:
        """``work`` on one connection; with ``transaction``, between BEGIN and
        COMMIT, retried whole after a deadlock or lock wait timeout. A
        database dropped under us is created again (once per call)."""
        attempt = 0
        recreated = False
        while True:
            try:
                return self._run_once(work, transaction)
            except pymysql.err.OperationalError as exc:
                if error_code(exc) == UNKNOWN_DATABASE and not recreated:
                    recreated = True
                    self._create_database()
                    continue
                if not transaction or error_code(exc) not in LOCK_CONFLICT:
                    raise storage_error(self._address, exc) from exc
                attempt += 1
                if attempt > LOCK_RETRIES:
                    raise storage_error(self._address, exc) from exc
                _backoff(attempt)
            except pymysql.MySQLError as exc:
                raise storage_error(self._address, exc) from exc

    def _run_once(self, work: Callable[[Session], T], transaction: bool) -> T:
        conn, generation = self._checkout()
        reusable = False
        try:
            with conn.cursor() as cursor:
                if not self._prepared:  # DDL: before any BEGIN
                    self._prepare(Session(cursor, in_transaction=False))
                    self._prepared = True  # racing threads may both prepare: it is idempotent
                if transaction:
                    conn.begin()
                result = work(Session(cursor, transaction))
                if transaction:
                    conn.commit()
            reusable = True
            return result
        except Exception as exc:
            if is_unreachable(exc):
                self.flush()
                raise self._unavailable(_OneLine(describe(exc))) from exc
            reusable = not transaction or self._rolled_back(conn)
            raise
        finally:
            # Not reusable also after KeyboardInterrupt and the like: the
            # connection may be mid-statement.
            if reusable:
                self._checkin(conn, generation)
            else:
                _close(conn)

    @staticmethod
    def _rolled_back(conn: Connection[Cursor]) -> bool:
        try:
            conn.rollback()
            return True
        except Exception:  # noqa: BLE001 -- the original error is the one to report
            return False

    def _checkout(self) -> tuple[Connection[Cursor], int]:
        while True:
            try:
                conn, generation, last_used = self._idle.get_nowait()
            except queue.Empty:
                break
            if generation != self._generation:
                _close(conn)
                continue
            if time.monotonic() - last_used < IDLE_PING_S:
                return conn, generation
            try:
                conn.ping()
                return conn, generation
            except Exception:  # noqa: BLE001 -- dead while idle: replace it with a new one
                _close(conn)
        generation = self._generation
        try:
            return self._open(), generation
        except Exception as exc:
            if is_unreachable(exc) or is_foreign(exc):
                raise self._unavailable(_OneLine(self._describe_refusal(exc))) from exc
            raise

    def _describe_refusal(self, exc: BaseException) -> str:
        # A server requiring TLS (require_secure_transport) answers a plain
        # client's right password with "access denied" too.
        text = describe(exc)
        if error_code(exc) == ACCESS_DENIED and self._tls is None:
            text += "; if the server requires TLS, add ?ssl_ca=CA_FILE to the URL"
        return text

    def _checkin(self, conn: Connection[Cursor], generation: int) -> None:
        if generation == self._generation and self._idle.qsize() < self._max_idle:
            self._idle.put((conn, generation, time.monotonic()))
        else:
            _close(conn)

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
                session = Session(cursor, in_transaction=False)
                session.execute(sql("session_isolation"))
                lock_wait_s = max(1, int(self._timeout * 0.6))
                session.execute(sql("session_setup"), {"lock_wait_s": lock_wait_s})
        except BaseException:
            _close(conn)
            raise
        return conn

    def _create_database(self) -> None:
        """CREATE DATABASE IF NOT EXISTS over a connection without a default
        database; our own tables are then created again by ``prepare``."""
        try:
            bootstrap = self._connect(with_database=False)
        except Exception as exc:
            if is_unreachable(exc) or is_foreign(exc):
                raise self._unavailable(_OneLine(describe(exc))) from exc
            raise
        try:
            with bootstrap.cursor() as cursor:
                cursor.execute(sql("create_database", database=self._address.database))
        except Exception as exc:
            if is_unreachable(exc):
                raise self._unavailable(exc) from exc
            raise
        finally:
            _close(bootstrap)
        self._prepared = False

    def invalidate_schema(self) -> None:
        """Run ``prepare`` again before the next unit of work (one of our own
        tables has gone missing)."""
        self._prepared = False

    def flush(self) -> None:
        """Close every idle connection; ones in use are closed when returned."""
        with self._lock:
            self._generation += 1
        while True:
            try:
                conn, _, _ = self._idle.get_nowait()
            except queue.Empty:
                return
            _close(conn)

    def close(self) -> None:
        self.flush()


def _close(conn: Connection[Cursor]) -> None:
    # Already closed, or the socket is dead: either way the connection is gone.
    with contextlib.suppress(Exception):
        conn.close()
