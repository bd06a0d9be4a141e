"""Connections to the app-data MySQL servers: one small thread-safe pool per
server (not per shard: a server holds many shard databases, and every
statement names its database).

Why not the job service's ``pinlater.storage.mysql_pool``: tasks depend on
the job service's public API only, and that pool is an internal of its MySQL
backend; it is also built around one database per pool (created on demand,
with the backend's own DDL hook) and raises PinLaterErrors, whose wire codes
mean "a job shard is down", not "an app-data shard is down". What is kept
from it: autocommit connections, an idle connection pinged before reuse,
every idle connection dropped when the server turns out to be unreachable,
and a statement retried after a deadlock or lock wait timeout (it was rolled
back, so running it again is safe). Shared with it: the URL and its TLS
files (``pinlater.storage.urls``, a module of plain functions), so a shard
map URL reads exactly like a job shard's.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import pymysql
from pymysql.connections import Connection
from pymysql.cursors import Cursor

from pinlater.observe.seam import app_call
from pinlater.storage.urls import mysql_connect_options
from tasks.appdata.errors import AppDataStorageError, AppDataUnavailable
from tasks.appdata.shardmap import Server
from tasks.appdata.sql import sql

T = TypeVar("T")
Conn: TypeAlias = "Connection[Cursor]"

UNREACHABLE = frozenset({1040, 1044, 1045, 1053, 1129, 1130, 1927, 2002, 2003, 2006, 2013, 2055})
LOCK_CONFLICT = frozenset({1205, 1213})
LOCK_RETRIES = 4
IDLE_PING_S = 2.0


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
        self._max_idle = max_idle
        self._idle: queue.LifoQueue[tuple[Conn, int, float]] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._generation = 0
        # Made once (a bad CA file is a ValueError here), shared by every connect.
        self._tls = server.tls.context() if server.tls is not None else None

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
        conn, generation = self._checkout()
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
                self._checkin(conn, generation)
            else:
                _close(conn)

    def _checkout(self) -> tuple[Conn, int]:
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
                conn.ping(reconnect=False)
                return conn, generation
            except Exception:  # noqa: BLE001 -- died while idle: open a new one instead
                _close(conn)
        generation = self._generation
        try:
            return self._open(), generation
        except pymysql.MySQLError as exc:
            if _unreachable(exc):
                raise AppDataUnavailable(f"{self.server}: {_describe(exc)}") from exc
            raise  # the server answered: run() reports it as a storage error
        except Exception as exc:  # not a MySQL server at all
            raise AppDataUnavailable(f"{self.server}: not a MySQL server? ({_describe(exc)})") from exc

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
            _close(conn)
            raise
        return conn

    def _checkin(self, conn: Conn, generation: int) -> None:
        if generation == self._generation and self._idle.qsize() < self._max_idle:
            self._idle.put((conn, generation, time.monotonic()))
        else:
            _close(conn)

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

    close = flush


def _close(conn: Conn) -> None:
    with contextlib.suppress(Exception):
        conn.close()
