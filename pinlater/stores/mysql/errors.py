"""MySQL's errors as the job service reports them: which error numbers mean
an unreachable server, a lock lost, a write refused; one line per error
naming the store.
"""

from __future__ import annotations

import pymysql

from pinlater.errors import PinLaterError, StorageError
from pinlater.stores.base import ShardWriteRefused

# Errors meaning "the server cannot be reached": can't connect (2002, 2003),
# gone away (2006), lost connection (2013, 2055), shutdown in progress
# (1053), connection killed (1927).
UNREACHABLE = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055})
# Lost while a statement or COMMIT was under way (a read timed out, the
# connection dropped): it may have been applied, unless a transaction it
# was inside had not committed (the server rolls that back).
LOST_DURING_QUERY = 2013
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
DUPLICATE_KEY = 1062
# A job table that cannot take unique keys by its trigger: made by older
# code, without the ukey column (1054), or still refusing keys because its
# trigger is not made yet (4025, its ukey_untaken constraint).
CONSTRAINT_FAILED = 4025
UNTRIGGERED = frozenset({1054, CONSTRAINT_FAILED})
# The account may not make a trigger: no TRIGGER privilege (1142), or
# SUPER needed under binary logging (1419, 1227).
NO_TRIGGER_PRIVILEGE = frozenset({1142, 1227, 1419})
# A trigger's definer (the account that made it) no longer exists: every
# INSERT into its table fails until the trigger is made again.
NO_SUCH_DEFINER = 1449
ACCESS_DENIED = 1045
UNKNOWN_DATABASE = 1049


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


def is_foreign(exc: BaseException, *, connecting: bool = False) -> bool:
    """Not a MySQL server's answer: PyMySQL choking on what another kind of
    server (Redis, HTTP...) sent back, with an error of its own or, while
    connecting, one of its protocol errors that carries no server error
    number ("Packet sequence number wrong": an HTTP reply's first bytes
    read as a packet header)."""
    if not isinstance(exc, pymysql.MySQLError | PinLaterError):
        return True
    return connecting and isinstance(exc, pymysql.err.InternalError) and error_code(exc) is None


def describe(exc: BaseException, *, connecting: bool = False) -> str:
    """One line for an error of PyMySQL's (met while ``connecting``)."""
    code = error_code(exc)
    args: tuple[object, ...] = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    if is_foreign(exc, connecting=connecting):
        return f"not a MySQL server? ({type(exc).__name__}: {exc})"
    return f"MySQL error {code}: {text}" if code is not None else f"{type(exc).__name__}: {text}"
