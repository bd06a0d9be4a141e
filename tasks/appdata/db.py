"""Connections to the app-data MySQL servers: one small thread-safe pool per
server (not per shard: a server holds many shard databases, and every
statement names its database).

Why not the job service's MySQL pool: that pool is an internal of its MySQL
store kind, built around one database per pool (created on demand, with the
store's own DDL hook), and raises PinLaterErrors, whose wire codes mean "a
job shard is down", not "an app-data shard is down". Shared with it: the
checkout (``pinlater.kit.dbpool``: an idle connection pinged before reuse,
every idle connection dropped when the server turns out to be unreachable)
and the URL with its TLS files (``pinlater.stores.mysql.public``), so a
shard map URL reads exactly like a job shard's. Kept here: autocommit
connections, and a statement retried after a deadlock or lock wait timeout
(it was rolled back, so running it again is safe).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import pymysql
from pymysql.connections import Connection
from pymysql.cursors import Cursor

from pinlater.kit.dbpool import PoolCore, close_quietly
from pinlater.observe.seam import app_call
from pinlater.stores.mysql.public import mysql_connect_options
from tasks.appdata.errors import AppDataStorageError, AppDataUnavailable
from tasks.appdata.shardmap import Server
from tasks.appdata.sql import sql

T = TypeVar("T")
Conn: TypeAlias = "Connection[Cursor]"

UNREACHABLE = frozenset({1040, 1044, 1045, 1053, 1129, 1130, 1927, 2002, 2003, 2006, 2013, 2055})
LOCK_CONFLICT = frozenset({1205, 1213})
LOCK_RETRIES = 4


def _errno(exc: BaseException) -> int | None:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _unreachable(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.InterfaceError | OSError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and _errno(exc) in UNREACHABLE


def _describe(exc: BaseException) -> str:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    code = _errno(exc)
    return f"MySQL error {code}: {text}" if code is not None else f"{type(exc).__name__}: {text}"


class ServerPool:
    """Idle autocommit connections to one server, borrowed per unit of work."""

    def __init__(self, server: Server, *, socket_timeout_s: float = 5.0, max_idle: int = 8) -> None:
        self.server = server
        self._timeout = socket_timeout_s
        # Made once (a bad CA file is a ValueError here), shared by every connect.
        self._tls = server.tls.context() if server.tls is not None else None
        self._core: PoolCore[Conn] = PoolCore(
            self._open, ping=lambda conn: conn.ping(reconnect=False), open_failed=self._open_failed,
            max_idle=max_idle,
        )

    def run(self, work: Callable[[Cursor], T]) -> T:
        """``work`` with a cursor of one connection. Errors come out as
        AppDataUnavailable (server unreachable) or AppDataStorageError.
        ``work`` must be safe to run again after a deadlock (single
        statements are: InnoDB rolled them back)."""
        # Reported as an app's store call (pinlater.observe.seam), named
        # after the work's own function (a query helper's), without the nesting.
        name = getattr(work, "__qualname__", "work").replace(".<locals>", "")
        attributes = {"db.system": "mysql", "server.address": str(self.server), "code.function": name}
        return app_call("mysql", str(self.server), name, lambda: self._run(work), attributes)

    def _run(self, work: Callable[[Cursor], T]) -> T:
        attempt = 0
        while True:
            try:
                return self._run_once(work)
            except pymysql.MySQLError as exc:
                if _errno(exc) in LOCK_CONFLICT and attempt < LOCK_RETRIES:
                    attempt += 1
                    time.sleep(random.uniform(0.005, 0.02) * attempt)
                    continue
                raise AppDataStorageError(f"{self.server}: {_describe(exc)}", _errno(exc)) from exc

    def _run_once(self, work: Callable[[Cursor], T]) -> T:
        conn, generation = self._core.checkout()
        reusable = False
        try:
            with conn.cursor() as cursor:
                result = work(cursor)
            reusable = True
            return result
        except pymysql.MySQLError as exc:
            if _unreachable(exc):
                self.flush()
                raise AppDataUnavailable(f"{self.server}: {_describe(exc)}") from exc
            reusable = True  # the server answered: the connection is fine
            raise
        finally:
            if reusable:
                self._core.checkin(conn, generation)
            else:
                close_quietly(conn)

    def _open_failed(self, exc: Exception) -> Exception | None:
        if isinstance(exc, pymysql.MySQLError):
            if _unreachable(exc):
                return AppDataUnavailable(f"{self.server}: {_describe(exc)}")
            return None  # the server answered: run() reports it as a storage error
        return AppDataUnavailable(f"{self.server}: not a MySQL server? ({_describe(exc)})")

    def _open(self) -> Conn:
        s = self.server
        conn: Conn = pymysql.connect(
            host=s.host,
            port=s.port,
            user=s.user,
            password=s.password,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=self._timeout,
            read_timeout=self._timeout,
            write_timeout=self._timeout,
            **mysql_connect_options(self._tls),
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql("session_isolation"))
                cursor.execute(sql("session_setup"))
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    def flush(self) -> None:
        """Close every idle connection; ones in use are closed when returned."""
        self._core.flush()

    close = flush
