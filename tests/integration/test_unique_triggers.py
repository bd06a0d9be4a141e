"""MySQL job tables take unique keys by a trigger when the job service's
account may make one, on a MariaDB of this module's own (its user has
the privileges the job service needs and, until a test grants it, not
TRIGGER): without the privilege keys are held the two-statement way and
the tables keep refusing keys in their rows; an account that made the
triggers and is then dropped (credentials rotated) does not stop the
queue, since the next enqueue makes them again."""

from __future__ import annotations

import logging
import uuid

import pytest

from pinlater.errors import StorageError
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import EnqueueItem, Existing
from pinlater.stores.mysql.shard import MySQLBackend
from tests.integration.private_mariadb import USER, PrivateMariaDB


@pytest.fixture
def mariadb(private_mariadb: PrivateMariaDB) -> PrivateMariaDB:
    return private_mariadb


@pytest.fixture
def database(mariadb: PrivateMariaDB) -> str:
    name = f"pl_trig_{uuid.uuid4().hex[:10]}"
    mariadb.root(f"CREATE DATABASE {name}")
    return name


def _item(unique: str, priority: int = 1) -> EnqueueItem:
    return EnqueueItem(b"x", priority, None, 1, "", unique=unique)


def _held_once(backend: MySQLBackend, queue: str, key: str, priority: int) -> int:
    [first] = backend.enqueue_unique(queue, [_item(key, priority)], 0, 3)
    assert isinstance(first, int)
    assert backend.enqueue_unique(queue, [_item(key, priority)], 0, 3) == [Existing(priority, first)]
    assert backend.enqueue_unique(queue, [_item(key, 3)], 0, 3) == [Existing(priority, first)]
    return first


def _triggers(mariadb: PrivateMariaDB, database: str) -> dict[str, str]:
    """Table -> the definer of its trigger."""
    rows = mariadb.root(f"SELECT event_object_table, definer FROM information_schema.triggers "
                        f"WHERE trigger_schema = '{database}'")
    return {str(table): str(definer) for table, definer in rows}


def test_an_account_without_the_trigger_privilege_holds_keys_in_two_statements(
    mariadb: PrivateMariaDB, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MySQLBackend.from_url("d1", mariadb.url(database), socket_timeout_s=5.0)
    try:
        queue = f"u_{uuid.uuid4().hex[:8]}"
        with caplog.at_level(logging.WARNING, logger="pinlater.stores.mysql.connection"):
            backend.create_queue(queue, 3)
            first = _held_once(backend, queue, "k", 1)
            _held_once(backend, queue, "k2", 2)
        warned = [r.getMessage() for r in caplog.records if "may not make triggers" in r.getMessage()]
        assert len(warned) == 1, warned
        assert "MySQL error 1142" in warned[0]
        assert _triggers(mariadb, database) == {}
        rows = mariadb.root(f"SELECT id, ukey FROM {database}.{job_table(queue, 1)}")
        assert [tuple(r) for r in rows] == [(first, None)]  # the key is in pinlater_unique alone
        refusing = mariadb.root(f"SELECT COUNT(*) FROM information_schema.check_constraints "
                                f"WHERE constraint_schema = '{database}' AND constraint_name = 'ukey_untaken'")
        assert refusing == [(3,)]
    finally:
        backend.close()


def test_triggers_of_a_dropped_account_are_made_again_by_the_next_enqueue(
    mariadb: PrivateMariaDB, database: str
) -> None:
    maker = f"pl_gone_{uuid.uuid4().hex[:8]}"
    mariadb.root(f"CREATE USER '{maker}'@'127.0.0.1' IDENTIFIED BY 'gone'",
                 f"GRANT ALL ON {database}.* TO '{maker}'@'127.0.0.1'")
    queue = f"u_{uuid.uuid4().hex[:8]}"
    made = MySQLBackend.from_url("d1", f"mysql://{maker}:gone@127.0.0.1:{mariadb.port}/{database}")
    try:
        made.create_queue(queue, 3)
        _held_once(made, queue, "before", 1)
    finally:
        made.close()
    assert set(_triggers(mariadb, database).values()) == {f"{maker}@127.0.0.1"}
    mariadb.root(f"DROP USER '{maker}'@'127.0.0.1'")

    # An account that may not make them either: the error names the account gone.
    unable = MySQLBackend.from_url("d1", mariadb.url(database), socket_timeout_s=5.0)
    try:
        with pytest.raises(StorageError, match=rf"MySQL error 1449: .*'{maker}'@'127.0.0.1'") as failed:
            unable.enqueue(queue, [EnqueueItem(b"plain", 2, None, 1, "")])
        assert "\n" not in str(failed.value)
    finally:
        unable.close()
    # A connection sees a database's grants from its next USE: a new backend.
    mariadb.root(f"GRANT TRIGGER ON {database}.* TO '{USER}'@'127.0.0.1'")
    backend = MySQLBackend.from_url("d1", mariadb.url(database), socket_timeout_s=5.0)
    try:
        [plain] = backend.enqueue(queue, [EnqueueItem(b"plain", 2, None, 1, "")])
        assert isinstance(plain, int)
        # Priority 2's trigger is this account's now, 1's and 3's on their first insert.
        assert _triggers(mariadb, database)[job_table(queue, 2)] == f"{USER}@127.0.0.1"
        _held_once(backend, queue, "after", 1)
        assert backend.enqueue_unique(queue, [_item("before", 2)], 0, 3)[0] == Existing(1, 1)
        assert set(_triggers(mariadb, database).values()) == {f"{USER}@127.0.0.1"}
    finally:
        backend.close()
        mariadb.root(f"REVOKE TRIGGER ON {database}.* FROM '{USER}'@'127.0.0.1'")
