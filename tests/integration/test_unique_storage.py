"""What a unique key leaves in its store: nothing once its job has left
storage (garbage collection, an operator's delete, a queue delete), on
Redis (the queue's ``unique`` hash, swept a few entries for each job that
leaves: a small hash whole) and MySQL (``pinlater_unique``), and a key
re-taken by a later job is not dropped with the job that held it before;
and how MySQL takes new keys: by each job table's trigger, or the
two-statement way on a table without one, never unrecorded."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import cast

import redis

from pinlater.kit.sqlblocks import job_table
from pinlater.states import JobState
from pinlater.stores.base import AckItem, EnqueueItem, Existing
from pinlater.stores.mysql.shard import MySQLBackend
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.mysql_support import raw_connection


def _item(unique: str, priority: int = 1) -> EnqueueItem:
    return EnqueueItem(b"x", priority, None, 1, "", unique=unique)


def _finish(backend: RedisBackend | MySQLBackend, queue: str, priority: int = 1) -> None:
    for job in backend.dequeue(queue, [priority], 100, "w").jobs:
        assert backend.ack_succeeded(queue, [AckItem(priority, job.local_id, "w", "", job.claim)]) == [True]


def _walk(backend: RedisBackend | MySQLBackend, queue: str, left: Callable[[], int]) -> None:
    """Keys a, b, c taken; a re-taken after its job ended; then every job
    leaves storage, one way each, and the store's record of keys with them."""
    [a1, _b, _c] = backend.enqueue_unique(queue, [_item("a"), _item("b"), _item("c", 2)], 0, 3)
    _finish(backend, queue)  # a1 and b succeed
    [a2] = backend.enqueue_unique(queue, [_item("a")], 0, 3)
    assert isinstance(a2, int) and a2 != a1
    assert backend.enqueue_unique(queue, [_item("a", 3)], 0, 3) == [Existing(1, a2)]
    assert left() == 3
    # a1 leaves: a stays taken by a2.
    assert backend.gc(queue, 1, JobState.SUCCEEDED, 0, 100) == 2  # a1 and b
    assert left() == 2
    assert backend.enqueue_unique(queue, [_item("a")], 0, 3) == [Existing(1, a2)]
    assert backend.delete(queue, 1, JobState.PENDING, [a2], 10) == 1
    assert backend.delete(queue, 2, JobState.PENDING, None, 10) == 1
    assert left() == 0
    backend.enqueue_unique(queue, [_item("d")], 0, 3)
    backend.delete_queue(queue)
    assert left() == 0


def _redis_keys(raw: redis.Redis[bytes], queue: str) -> int:
    return sum(1 for field in raw.hkeys(f"pl:{queue}:unique") if field.startswith(b"k"))


def test_redis_drops_keys_with_their_jobs(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    queue = f"u_{uuid.uuid4().hex[:8]}"
    be.create_queue(queue, 3)
    _walk(be, queue, lambda: _redis_keys(raw, queue))


def test_redis_sweeps_a_large_hash_as_its_jobs_leave(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    """Past one HSCAN page the sweep goes a few entries per job that leaves:
    what is left of jobs gone stays a fraction of what went, and further
    departures clear it; the keys of jobs still stored (priority 2 here)
    are never touched."""
    queue, jobs = f"u_{uuid.uuid4().hex[:8]}", 2000
    be.create_queue(queue, 2)
    kept = [i for i in be.enqueue_unique(queue, [_item(f"kept{i}", 2) for i in range(300)], 0, 2)
            if isinstance(i, int)]
    assert len(kept) == 300
    for start in range(0, jobs, 100):
        be.enqueue_unique(queue, [_item(f"gone{start + i}") for i in range(100)], 0, 2)
        _finish(be, queue)
    while be.gc(queue, 1, JobState.SUCCEEDED, 0, 100):
        pass
    left = _redis_keys(raw, queue) - len(kept)
    assert left <= jobs // 4, f"{left} entries of {jobs} jobs gone are left"
    # Jobs without keys leaving, one by one, sweep the rest away.
    for _ in range(200):
        if _redis_keys(raw, queue) == len(kept):
            break
        [plain] = be.enqueue(queue, [EnqueueItem(b"x", 1, None, 1, "")])
        assert be.delete(queue, 1, JobState.PENDING, [plain], 10) == 1
    assert _redis_keys(raw, queue) == len(kept), "departures did not clear the entries of jobs gone"
    assert be.enqueue_unique(queue, [_item("kept7")], 0, 2) == [Existing(2, kept[7])]


def test_mysql_drops_keys_with_their_jobs(backend: MySQLBackend, database: str) -> None:
    queue = f"u_{uuid.uuid4().hex[:8]}"
    backend.create_queue(queue, 3)
    conn = raw_connection(database)

    def left() -> int:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM pinlater_unique WHERE queue = %s", (queue,))
            return int(cur.fetchone()[0])

    try:
        _walk(backend, queue, left)
    finally:
        conn.close()


def _raw(database: str, *statements: str) -> list[tuple[object, ...]]:
    """Runs ``statements`` on ``database``; the last one's rows."""
    conn = raw_connection(database)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


def _table_state(database: str, table: str) -> tuple[int, int]:
    """(triggers on ``table``, its ukey_untaken constraints)."""
    [(triggers,)] = _raw(database, "SELECT COUNT(*) FROM information_schema.triggers "
                                   f"WHERE trigger_schema = DATABASE() AND event_object_table = '{table}'")
    [(refusals,)] = _raw(database, "SELECT COUNT(*) FROM information_schema.check_constraints "
                                   f"WHERE constraint_schema = DATABASE() AND table_name = '{table}' "
                                   "AND constraint_name = 'ukey_untaken'")
    return int(cast(int, triggers)), int(cast(int, refusals))


def _held_once(backend: MySQLBackend, queue: str, key: str, priority: int) -> int:
    """A job of ``key`` stored, and a second enqueue of it (at another
    priority too) answered with that job."""
    [first] = backend.enqueue_unique(queue, [_item(key, priority)], 0, 3)
    assert isinstance(first, int)
    assert backend.enqueue_unique(queue, [_item(key, priority)], 0, 3) == [Existing(priority, first)]
    assert backend.enqueue_unique(queue, [_item(key, 3 if priority != 3 else 1)], 0, 3) == [Existing(priority, first)]
    return first


def test_mysql_takes_new_keys_by_each_tables_trigger(backend: MySQLBackend, database: str) -> None:
    """A store at the current layout: every job table has its trigger and
    no refusal left, and a new key is taken in the INSERT itself: the key
    in the job's row, its pinlater_unique row naming the job."""
    queue = f"u_{uuid.uuid4().hex[:8]}"
    backend.create_queue(queue, 3)
    for priority in (1, 2, 3):
        assert _table_state(database, job_table(queue, priority)) == (1, 0)
    ids = backend.enqueue_unique(queue, [_item("a"), _item("b", 2), EnqueueItem(b"plain", 2, None, 1, "")], 0, 3)
    a, b, plain = (cast(int, i) for i in ids)
    assert _raw(database, f"SELECT id, ukey FROM {job_table(queue, 2)} ORDER BY id") == [(b, b"b"), (plain, None)]
    assert sorted(_raw(database, f"SELECT ukey, priority, id FROM pinlater_unique WHERE queue = '{queue}'")) == [
        (b"a", 1, a), (b"b", 2, b)]
    _held_once(backend, queue, "c", 3)


def test_mysql_table_left_without_its_trigger_refuses_keys_until_armed(
    backend: MySQLBackend, database: str
) -> None:
    """A process that died between making a job table and its trigger
    left the table refusing keys: a unique enqueue there still holds its
    keys (the two-statement way) and arms the table for the next."""
    queue = f"u_{uuid.uuid4().hex[:8]}"
    backend.create_queue(queue, 3)
    table = job_table(queue, 2)
    _raw(database, f"DROP TRIGGER {table}", f"ALTER TABLE {table} ADD CONSTRAINT ukey_untaken CHECK (ukey IS NULL)")
    assert _table_state(database, table) == (0, 1)
    first = _held_once(backend, queue, "k", 2)
    assert _table_state(database, table) == (1, 0)
    assert _raw(database, f"SELECT id, ukey FROM {table}") == [(first, None)]  # stored the old way
    second = _held_once(backend, queue, "k2", 2)
    assert _raw(database, f"SELECT ukey FROM {table} WHERE id = {second}") == [(b"k2",)]


def test_mysql_table_of_older_code_takes_keys_the_old_way(backend: MySQLBackend, database: str) -> None:
    """A job table made by code older than the trigger (no ukey column,
    no trigger) on a store at the current layout: keys still held."""
    queue = f"u_{uuid.uuid4().hex[:8]}"
    backend.create_queue(queue, 3)
    table = job_table(queue, 1)
    _raw(database, f"DROP TRIGGER {table}", f"ALTER TABLE {table} DROP COLUMN ukey")
    first = _held_once(backend, queue, "k", 1)
    assert _raw(database, f"SELECT ukey, id FROM pinlater_unique WHERE queue = '{queue}'") == [(b"k", first)]

