"""The MySQL shard backend's maintenance and reads against the real MariaDB
of ``scripts/services`` (gc, retry, delete, count, scan, lookup, dequeues
across priorities and threads); its transitions are in
``test_mysql_backend``. Every test module run uses a throwaway database,
dropped at the end."""

from __future__ import annotations

import threading
import time

import pytest

from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import (
    AckItem,
    CheckpointItem,
    FailItem,
    JobRecord,
    ScanQuery,
)
from pinlater.stores.mysql.shard import MySQLBackend
from tests.integration.mysql_support import F, P, R, S, claimed, item, one, rec
from tests.integration.mysql_support import raw_connection as _raw

HOUR = 3_600_000


def test_gc_deletes_old_terminal_jobs(backend: MySQLBackend, queue: str) -> None:
    done = [claimed(backend, queue) for _ in range(3)]
    backend.ack_succeeded(queue, [AckItem(1, i, "w1", "") for i in done])
    failed = claimed(backend, queue, attempts=1)
    backend.ack_failed(queue, [FailItem(1, failed, "w1", "", 0)])
    pending = one(backend, queue)
    assert backend.gc(queue, 1, S, HOUR, 10) == 0
    assert backend.gc(queue, 1, S, 0, 2) == 2
    assert backend.gc(queue, 1, S, 0, 10) == 1
    assert backend.gc(queue, 1, F, 0, 10) == 1
    with pytest.raises(ValueError):
        backend.gc(queue, 1, P, 0, 10)
    assert backend.lookup(queue, 1, [*done, failed, pending], False)[:4] == [None] * 4
    assert rec(backend, queue, pending).state is P


def test_retry_failed_most_recent_first(backend: MySQLBackend, queue: str) -> None:
    ids = []
    for _ in range(3):
        local_id = claimed(backend, queue, attempts=1)
        backend.ack_failed(queue, [FailItem(1, local_id, "w1", "", 0)])
        ids.append(local_id)
        time.sleep(0.005)
    later = backend.now_ms() + HOUR
    assert backend.retry_failed(queue, 1, 4, later, 2) == 2
    states = [rec(backend, queue, i) for i in ids]
    assert [r.state for r in states] == [F, P, P]
    assert all((r.attempts_allowed, r.attempts_remaining, r.run_after_ms) == (4, 4, later)
               for r in states[1:])
    assert backend.retry_failed(queue, 1, 2, None, 10) == 1
    r = rec(backend, queue, ids[0])
    assert (r.state, r.attempts_remaining, r.run_after_ms) == (P, 2, r.updated_at_ms)


def test_delete_by_ids_and_by_limit(backend: MySQLBackend, queue: str) -> None:
    running = claimed(backend, queue)
    ids = backend.enqueue(queue, [item() for _ in range(6)])
    assert backend.delete(queue, 1, P, [ids[0], ids[1], running, 10**9], 0) == 2
    assert backend.delete(queue, 1, P, [], 10) == 0
    assert backend.delete(queue, 1, P, None, 3) == 3
    assert backend.count(queue, 1, P, False) == 1
    assert backend.delete(queue, 1, R, None, 10) == 1
    assert backend.lookup(queue, 1, [running], False) == [None]


# -- reads ------------------------------------------------------------------------------


def test_count_now_and_future(backend: MySQLBackend, queue: str) -> None:
    now = backend.now_ms()
    backend.enqueue(queue, [item(), item(run_after=now - 5), item(run_after=now + HOUR)])
    claimed(backend, queue, priority=2)
    assert backend.count(queue, 1, P, False) == 2
    assert backend.count(queue, 1, P, True) == 1
    assert backend.count(queue, 2, R, False) == backend.count(queue, 2, R, True) == 1
    assert backend.count(queue, 3, S, False) == 0


def test_scan_pages_2500_jobs_of_one_batch_exactly_once(backend: MySQLBackend, queue: str) -> None:
    at = backend.now_ms() - 1000
    ids = backend.enqueue(queue, [item(b"%d" % i, run_after=at) for i in range(2500)])
    seen: list[JobRecord] = []
    cursor: tuple[int, int] | None = None
    while True:
        page = backend.scan(ScanQuery(queue, 1, P, False, cursor, 300, include_body=False))
        if not page:
            break
        seen += page
        cursor = (page[-1].sort_time_ms, page[-1].local_id)
    assert [r.local_id for r in seen] == sorted(ids, reverse=True)
    assert all(r.body is None and r.sort_time_ms == at for r in seen)
    assert backend.scan(ScanQuery(queue, 1, P, True, None, 10, False)) == []
    [top] = backend.scan(ScanQuery(queue, 1, P, False, None, 1, include_body=True))
    assert top.body == b"2499"


def test_scan_orders_by_sort_time_for_each_state(backend: MySQLBackend, queue: str) -> None:
    now = backend.now_ms()
    far = backend.enqueue(queue, [item(run_after=now + 2 * HOUR), item(run_after=now + HOUR)])
    assert [r.local_id for r in backend.scan(ScanQuery(queue, 1, P, True, None, 10, False))] == far
    first, second = claimed(backend, queue), claimed(backend, queue)
    time.sleep(0.005)
    backend.checkpoint(queue, [CheckpointItem(1, first, "w1", None, False, None, None, None)])
    running = backend.scan(ScanQuery(queue, 1, R, False, None, 10, False))
    assert [r.local_id for r in running] == [first, second]
    assert [r.local_id for r in backend.scan(ScanQuery(
        queue, 1, R, False, (running[0].sort_time_ms, running[0].local_id), 10, False))] == [second]


def test_lookup_in_the_order_asked(backend: MySQLBackend, queue: str) -> None:
    a, b = backend.enqueue(queue, [item(b"a"), item(b"b")])
    found = backend.lookup(queue, 1, [b, 10**9, a, b], include_body=False)
    assert [r.local_id if r else None for r in found] == [b, None, a, b]
    assert found[0] is not None and found[0].body is None
    assert backend.lookup(queue, 1, [], True) == []
    assert backend.lookup(queue, 2, [a], True) == [None]


def test_priorities_are_independent(backend: MySQLBackend, queue: str) -> None:
    p1 = backend.enqueue(queue, [item(b"one", priority=1)])
    p2 = backend.enqueue(queue, [item(b"two", priority=2)])
    assert p1 == p2  # ids are per (queue, priority)
    [job] = backend.dequeue(queue, [2], 10, "w1").jobs
    assert (job.priority, job.body) == (2, b"two")
    assert backend.count(queue, 1, P, False) == 1
    assert backend.ack_succeeded(queue, [AckItem(1, job.local_id, "w1", "")]) == [False]
    assert backend.ack_succeeded(queue, [AckItem(2, job.local_id, "w1", "")]) == [True]
    assert rec(backend, queue, p1[0], 1).state is P


def test_one_dequeue_claims_priorities_in_order_up_to_the_limit(backend: MySQLBackend, queue: str) -> None:
    backend.create_queue(queue, 4)
    p1 = backend.enqueue(queue, [item(b"1a"), item(b"1b")])
    p2 = backend.enqueue(queue, [item(b"2a", priority=2), item(b"2b", priority=2), item(b"2c", priority=2)])
    p4 = backend.enqueue(queue, [item(b"4a", priority=4)])
    got = backend.dequeue(queue, [1, 2], 4, "w1", look_ahead=[3, 4])
    assert [(j.priority, j.local_id) for j in got.jobs] == [(1, p1[0]), (1, p1[1]), (2, p2[0]), (2, p2[1])]
    assert got.next_priority is None  # the limit is met: no look ahead
    assert {j.claim for j in got.jobs} == {got.jobs[0].claim}
    assert [backend.count(queue, p, R, False) for p in (1, 2, 3, 4)] == [2, 2, 0, 0]  # nothing beyond the limit
    got = backend.dequeue(queue, [1, 2], 5, "w1", look_ahead=[3, 4])
    assert [(j.priority, j.local_id, j.body) for j in got.jobs] == [(2, p2[2], b"2c")]
    assert got.next_priority == 4  # the first look-ahead priority with a runnable job
    got = backend.dequeue(queue, [1, 2, 3], 5, "w1")
    assert (got.jobs, got.next_priority) == ([], None)
    assert [j.local_id for j in backend.dequeue(queue, [4], 5, "w1").jobs] == p4


def test_a_dequeue_failing_part_way_claims_nothing(backend: MySQLBackend, queue: str, database: str) -> None:
    ids = backend.enqueue(queue, [item(b"a"), item(b"b")])
    conn = _raw(database)
    with conn.cursor() as cur:  # priority 2's table is gone (the queue's tables are created again)
        cur.execute(f"DROP TABLE {job_table(queue, 2)}")
    conn.close()
    # The claim of priority 1 ran before the failing one of priority 2 and
    # was rolled back: only the retry's claim holds the jobs.
    jobs = backend.dequeue(queue, [1, 2], 10, "w1").jobs
    assert [j.local_id for j in jobs] == ids
    assert {rec(backend, queue, i).claim for i in ids} == {jobs[0].claim}
    assert backend.count(queue, 2, P, False) == 0


def test_a_single_ack_leaves_the_claim_a_batch_leaves_its_marker(
    backend: MySQLBackend, queue: str, database: str
) -> None:
    one_id = claimed(backend, queue)
    claim = _claim_column(database, queue, one_id)
    assert backend.ack_succeeded(queue, [AckItem(1, one_id, "w1", "")]) == [True]
    assert _claim_column(database, queue, one_id) == claim  # no write to the claim index
    assert rec(backend, queue, one_id).claim is None  # a finished job shows no claim
    a, b = claimed(backend, queue), claimed(backend, queue)
    assert backend.ack_succeeded(queue, [AckItem(1, a, "w1", ""), AckItem(1, b, "w9", "")]) == [True, False]
    assert str(_claim_column(database, queue, a)).startswith("acked:")
    assert rec(backend, queue, b).state is R


def _claim_column(database: str, queue: str, local_id: int) -> object:
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute(f"SELECT claim FROM {job_table(queue, 1)} WHERE id = %s", (local_id,))
        row = cur.fetchone()
    conn.close()
    assert row is not None
    return row[0]


def test_concurrent_dequeuers_never_share_a_job(backend: MySQLBackend, queue: str) -> None:
    ids = backend.enqueue(queue, [item() for _ in range(2000)])
    got: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        mine = got.setdefault(name, [])
        while True:
            jobs = backend.dequeue(queue, [1], 37, name).jobs
            if not jobs:
                return
            mine.extend(j.local_id for j in jobs)
            assert all(j.claim.endswith("@" + name) for j in jobs)
            assert backend.ack_succeeded(queue, [AckItem(1, j.local_id, name, "")
                                                 for j in jobs]) == [True] * len(jobs)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for mine in got.values() for i in mine]
    assert sorted(everything) == sorted(ids)  # each exactly once
    assert backend.count(queue, 1, S, False) == 2000
