"""What a unique key leaves in its store: nothing once its job has left
storage (garbage collection, an operator's delete, a queue delete), on
Redis (the queue's ``unique`` hash, swept a few entries for each job that
leaves: a small hash whole) and MySQL (``pinlater_unique``), and a key
re-taken by a later job is not dropped with the job that held it before."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import redis

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
