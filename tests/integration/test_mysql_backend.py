"""The MySQL shard backend against the real MariaDB of
``scripts/services`` (started if needed). Every test module run uses a
throwaway database, dropped at the end."""

from __future__ import annotations

import threading
import time
import uuid

import pymysql
import pytest

from pinlater.errors import PinLaterError
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import (
    CUSTOM_STATUS_MAX,
    AckItem,
    CheckpointItem,
    ExpiredClaims,
    FailItem,
    ShardBackend,
)
from pinlater.stores.mysql.errors import MySQLStorageError
from pinlater.stores.mysql.shard import INSERT_CHUNK_BYTES, MySQLBackend
from pinlater.stores.mysql.statements import sql
from tests.integration.mysql_support import F, P, R, S, claimed, item, one, rec
from tests.integration.mysql_support import raw_connection as _raw

HOUR = 3_600_000


# -- housekeeping ---------------------------------------------------------------


def test_protocol_schema_and_queue_lifecycle(backend: MySQLBackend, database: str) -> None:
    assert isinstance(backend, ShardBackend)
    backend.ping()
    assert abs(backend.now_ms() - time.time() * 1000) < 60_000
    name = f"t_{uuid.uuid4().hex[:12]}"
    backend.create_queue(name, 2)
    backend.create_queue(name, 3)  # idempotent, may grow
    assert name in backend.queue_names()
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (database,))
        tables = {r[0] for r in cur.fetchall()}
        assert {f"q_{name}_p{p}" for p in (1, 2, 3)} <= tables
        cur.execute("SELECT engine FROM information_schema.tables WHERE table_name = %s",
                    (f"q_{name}_p1",))
        assert cur.fetchone() == ("InnoDB",)
    one(backend, name, priority=3)
    backend.delete_queue(name)
    backend.delete_queue(name)  # idempotent
    assert name not in backend.queue_names()
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE %s",
                    (f"q\\_{name}\\_p%",))
        assert cur.fetchone() == (0,)
    conn.close()


def test_identifiers_are_validated_where_they_are_interpolated(backend: MySQLBackend) -> None:
    for bad in ("a`b", "a b", "x;drop", "", "é", "a" * 51):
        with pytest.raises(ValueError):
            job_table(bad, 1)
        with pytest.raises(ValueError):
            backend.enqueue(bad, [item()])
    for bad_priority in (0, 101, True):
        with pytest.raises(ValueError):
            job_table("ok", bad_priority)
    with pytest.raises(ValueError):
        sql("count_state", table="queues")  # not a job table
    with pytest.raises(ValueError):
        MySQLBackend.from_url("d1", "mysql://u:p@127.0.0.1:13306/bad-name")


def test_other_errors_propagate_as_storage_errors(backend: MySQLBackend, queue: str) -> None:
    with pytest.raises(MySQLStorageError) as info:  # INT out of range (strict mode)
        backend.enqueue(queue, [item(attempts=2**40)])
    assert isinstance(info.value, PinLaterError)
    assert isinstance(info.value.__cause__, pymysql.err.DataError)
    assert "\n" not in str(info.value) and "1264" in str(info.value)


# -- enqueue ----------------------------------------------------------------------


def test_enqueue_makes_pending_jobs(backend: MySQLBackend, queue: str) -> None:
    before = backend.now_ms()
    local_id = one(backend, queue, attempts=4, status="new", body=b"\x00\xffbin")
    r = rec(backend, queue, local_id)
    assert (r.state, r.attempts_allowed, r.attempts_remaining) == (P, 4, 4)
    assert (r.custom_status, r.body, r.claim) == ("new", b"\x00\xffbin", None)
    assert r.created_at_ms == r.updated_at_ms == r.run_after_ms
    assert before <= r.created_at_ms <= backend.now_ms()
    later = one(backend, queue, run_after=before + HOUR)
    assert rec(backend, queue, later).run_after_ms == before + HOUR
    capped = one(backend, queue, status="x" * (CUSTOM_STATUS_MAX + 10) + "tail")
    assert rec(backend, queue, capped).custom_status == "x" * CUSTOM_STATUS_MAX


def test_batch_ids_are_consecutive_and_belong_to_their_rows(
    backend: MySQLBackend, queue: str, database: str
) -> None:
    conn = _raw(database)
    with conn.cursor() as cur:
        cur.execute("SELECT @@innodb_autoinc_lock_mode")
        row = cur.fetchone()
    conn.close()
    assert row is not None and row[0] in (0, 1)  # the LAST_INSERT_ID() + offset assumption

    results: dict[int, list[int]] = {}

    def enqueue(worker: int) -> None:
        for batch in range(5):
            bodies = [f"{worker}-{batch}-{i}".encode() for i in range(100)]
            ids = backend.enqueue(queue, [item(body) for body in bodies])
            results[worker * 100 + batch] = ids
            assert ids == list(range(ids[0], ids[0] + 100))
            found = backend.lookup(queue, 1, ids, include_body=True)
            assert [r.body if r else None for r in found] == bodies

    threads = [threading.Thread(target=enqueue, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [i for ids in results.values() for i in ids]
    assert len(results) == 20 and len(set(all_ids)) == 2000


def test_batch_over_tables_and_chunks_is_all_or_nothing(backend: MySQLBackend, queue: str) -> None:
    big = b"z" * (INSERT_CHUNK_BYTES // 3)  # one per INSERT: several statements
    items = [item(big + bytes([i]), priority=1 + i % 3) for i in range(7)]
    ids = backend.enqueue(queue, items)
    for it, local_id in zip(items, ids, strict=True):
        assert rec(backend, queue, local_id, it.priority).body == it.body
    assert ids[0] < ids[3] < ids[6]  # increasing within a table, in enqueue order
    counts = [backend.count(queue, p, P, False) for p in (1, 2, 3)]
    bad = [item(priority=1), item(priority=2), item(priority=3, attempts=2**40)]
    with pytest.raises(MySQLStorageError):
        backend.enqueue(queue, bad)
    assert [backend.count(queue, p, P, False) for p in (1, 2, 3)] == counts


# -- dequeue, peek, ACKs ------------------------------------------------------------


def test_enqueue_dequeue_ack_success(backend: MySQLBackend, queue: str) -> None:
    now = backend.now_ms()
    ids = backend.enqueue(queue, [item(b"a", run_after=now - 10), item(b"b", run_after=now - 20),
                                  item(b"c", run_after=now + HOUR)])
    assert [j.local_id for j in backend.peek(queue, [1], 10).jobs] == [ids[1], ids[0]]
    assert all(j.claim == "" for j in backend.peek(queue, [1], 10).jobs)
    jobs = backend.dequeue(queue, [1], 10, "host:1").jobs
    assert [(j.local_id, j.body) for j in jobs] == [(ids[1], b"b"), (ids[0], b"a")]
    claim = jobs[0].claim
    assert {j.claim for j in jobs} == {claim}
    token, source = claim.split("@", 1)
    assert source == "host:1" and len(token) == 16 and int(token, 16) >= 0 and token.islower()
    r = rec(backend, queue, ids[0])
    assert (r.state, r.claim, r.attempts_remaining) == (R, claim, 3)
    assert r.updated_at_ms >= r.created_at_ms and r.sort_time_ms == r.updated_at_ms
    assert backend.dequeue(queue, [1], 10, "host:1").jobs == []
    assert backend.peek(queue, [1], 10).jobs == []

    acks = [AckItem(1, ids[0], "host:1", " done"), AckItem(1, ids[1], "host:1", "")]
    assert backend.ack_succeeded(queue, acks) == [True, True]
    r = rec(backend, queue, ids[0])
    assert (r.state, r.claim, r.custom_status) == (S, None, " done")
    assert r.updated_at_ms >= rec(backend, queue, ids[2]).created_at_ms


def test_ack_failure_with_retries_left_repends_after_the_delay(
    backend: MySQLBackend, queue: str
) -> None:
    local_id = claimed(backend, queue, attempts=3, status="s")
    assert backend.ack_failed(queue, [FailItem(1, local_id, "w1", "|e1", 5000)]) == [True]
    r = rec(backend, queue, local_id)
    assert (r.state, r.attempts_allowed, r.attempts_remaining, r.claim) == (P, 3, 2, None)
    assert r.run_after_ms == r.updated_at_ms + 5000
    assert r.custom_status == "s|e1"
    assert backend.count(queue, 1, P, future=True) == 1
    assert backend.dequeue(queue, [1], 10, "w1").jobs == []


def test_ack_failure_at_the_last_attempt_fails_the_job(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, attempts=1)
    run_after = rec(backend, queue, local_id).run_after_ms
    assert backend.ack_failed(queue, [FailItem(1, local_id, "w1", "x", 5000)]) == [True]
    r = rec(backend, queue, local_id)
    assert (r.state, r.attempts_remaining, r.claim, r.run_after_ms) == (F, 0, None, run_after)
    assert r.custom_status == "x"


def test_ack_failure_takes_the_policy_delay_by_retry_number(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, attempts=5)
    for expected_delay in (1, 2, 2):  # past the table's end its last entry holds
        assert backend.ack_failed(queue, [FailItem(1, local_id, "w1", "")], [1, 2]) == [True]
        r = rec(backend, queue, local_id)
        assert r.state is P and r.run_after_ms - r.updated_at_ms == expected_delay
        time.sleep(0.01)
        [_job] = backend.dequeue(queue, [1], 10, "w1").jobs
    # The ACK's own delay wins over the table.
    assert backend.ack_failed(queue, [FailItem(1, local_id, "w1", "", 7)], [1, 2]) == [True]
    r = rec(backend, queue, local_id)
    assert r.run_after_ms - r.updated_at_ms == 7 and r.attempts_remaining == 1


def test_ack_failure_batch_reports_each_item(backend: MySQLBackend, queue: str) -> None:
    live = claimed(backend, queue)
    items = [FailItem(1, live, "w1", "", 0), FailItem(1, live, "other", "", 0), FailItem(1, 999_999, "w1", "", 0)]
    # A stale item beside an applied one: the read-back by marker tells them apart.
    assert backend.ack_failed(queue, items[1:] + items[:1]) == [False, False, True]


def test_stale_acks_change_nothing(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, source="w1")
    before = rec(backend, queue, local_id)
    for wrong in ("w2", "W1", "w1 ", "", "1"):
        assert backend.ack_succeeded(queue, [AckItem(1, local_id, wrong, "!")]) == [False]
        assert backend.ack_failed(queue, [FailItem(1, local_id, wrong, "!", 0)]) == [False]
        assert backend.checkpoint(queue, [CheckpointItem(
            1, local_id, wrong, b"new", True, None, 9, "!")]) == [False]
    assert rec(backend, queue, local_id) == before
    # The job times out and is re-pended: the old claim's ACK is stale.
    assert backend.expire_claims(queue, 1, 0, 10) == ExpiredClaims(1, 0)
    repended = rec(backend, queue, local_id)
    assert backend.ack_succeeded(queue, [AckItem(1, local_id, "w1", "!")]) == [False]
    assert backend.ack_failed(queue, [FailItem(1, local_id, "w1", "!", 0)]) == [False]
    assert rec(backend, queue, local_id) == repended
    # Unknown ids and other priorities are stale too.
    assert backend.ack_succeeded(queue, [AckItem(1, 10**9, "w1", ""),
                                         AckItem(2, local_id, "w1", "")]) == [False, False]


def test_a_batch_naming_a_job_twice_applies_it_once(backend: MySQLBackend, queue: str) -> None:
    a, b = claimed(backend, queue), claimed(backend, queue)
    acks = [AckItem(1, a, "w1", "1"), AckItem(1, a, "w1", "2"), AckItem(1, b, "w2", ""),
            AckItem(1, b, "w1", "3")]
    assert backend.ack_succeeded(queue, acks) == [True, False, False, True]
    assert rec(backend, queue, a).custom_status == "1"
    c = claimed(backend, queue)
    beats = [CheckpointItem(1, c, "w1", None, False, None, None, "x"),
             CheckpointItem(1, c, "w1", None, True, None, None, "y"),
             CheckpointItem(1, c, "w1", None, False, None, None, "z")]
    assert backend.checkpoint(queue, beats) == [True, True, False]
    assert rec(backend, queue, c).custom_status == "yx"


def test_custom_status_caps(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, status="a" * 3990)
    beat = CheckpointItem(1, local_id, "w1", None, False, None, None, "P" * 20)
    assert backend.checkpoint(queue, [beat]) == [True]
    assert rec(backend, queue, local_id).custom_status == "P" * 20 + "a" * 3980
    assert backend.ack_succeeded(queue, [AckItem(1, local_id, "w1", "é" * 30)]) == [True]
    assert rec(backend, queue, local_id).custom_status == "a" * 3970 + "é" * 30


# -- checkpoint ------------------------------------------------------------------------


def test_checkpoint_heartbeat_body_attempts_and_status(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, attempts=3, status="old")
    before = rec(backend, queue, local_id)
    time.sleep(0.01)
    assert backend.checkpoint(queue, [CheckpointItem(
        1, local_id, "w1", None, False, None, None, None)]) == [True]
    beat = rec(backend, queue, local_id)
    assert beat.updated_at_ms > before.updated_at_ms
    assert (beat.state, beat.claim, beat.body, beat.custom_status) == (R, before.claim, b"body",
                                                                       "old")
    later = backend.now_ms() + HOUR
    assert backend.checkpoint(queue, [CheckpointItem(
        1, local_id, "w1", b"", False, later, 7, "new|")]) == [True]
    r = rec(backend, queue, local_id)
    assert (r.state, r.claim, r.body, r.custom_status) == (R, before.claim, b"", "new|old")
    assert (r.attempts_allowed, r.attempts_remaining, r.run_after_ms) == (7, 7, later)


def test_checkpoint_move_to_pending_spends_no_attempt(backend: MySQLBackend, queue: str) -> None:
    local_id = claimed(backend, queue, attempts=3)
    assert backend.checkpoint(queue, [CheckpointItem(
        1, local_id, "w1", b"next", True, None, None, None)]) == [True]
    r = rec(backend, queue, local_id)
    assert (r.state, r.claim, r.attempts_remaining, r.body) == (P, None, 3, b"next")
    assert r.run_after_ms == r.updated_at_ms
    [job] = backend.dequeue(queue, [1], 10, "w1").jobs
    later = backend.now_ms() + HOUR
    assert backend.checkpoint(queue, [CheckpointItem(
        1, job.local_id, "w1", None, True, later, 5, None)]) == [True]
    r = rec(backend, queue, local_id)
    assert (r.state, r.run_after_ms, r.attempts_allowed, r.attempts_remaining) == (P, later, 5, 5)
    assert backend.checkpoint(queue, [CheckpointItem(
        1, local_id, "w1", None, False, None, None, None)]) == [False]


# -- monitor operations ---------------------------------------------------------------


def test_expire_claims_repends_and_fails(backend: MySQLBackend, queue: str) -> None:
    twice = claimed(backend, queue, attempts=2)
    once = claimed(backend, queue, attempts=1)
    assert backend.expire_claims(queue, 1, HOUR, 10) == ExpiredClaims(0, 0)
    assert backend.expire_claims(queue, 1, 0, 10) == ExpiredClaims(1, 1)
    r = rec(backend, queue, twice)
    assert (r.state, r.attempts_remaining, r.claim) == (P, 1, None)
    assert r.run_after_ms == r.updated_at_ms
    r = rec(backend, queue, once)
    assert (r.state, r.attempts_remaining, r.claim) == (F, 0, None)
    backend.enqueue(queue, [item(attempts=5)] * 3)
    assert len(backend.dequeue(queue, [1], 10, "w1").jobs) == 4  # the re-pended one too
    assert backend.expire_claims(queue, 1, 0, 2) == ExpiredClaims(2, 0)
    assert backend.expire_claims(queue, 1, 0, 10) == ExpiredClaims(1, 1)
