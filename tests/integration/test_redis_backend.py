"""The Redis backend against a real Redis server.

Uses db 9 of the first local test Redis (``scripts/services``, port
16379), flushed before each test. If that server does not answer, the
fixture starts it with ``scripts/services start-redis`` and fails loudly if
it still does not answer: these tests never skip.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from pinlater.errors import StorageError
from pinlater.states import JobState
from pinlater.stores.base import (
    CUSTOM_STATUS_MAX,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    EnqueueItem,
    ExpiredClaims,
    FailItem,
    JobRecord,
    ShardBackend,
    ShardUnavailable,
)
from pinlater.stores.redis import keys
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.redis_support import URL

Q = "jobs"
HOUR = 3_600_000
P, R, S, F = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED


@pytest.fixture
def be(raw: redis.Redis[bytes]) -> Iterator[RedisBackend]:
    backend = RedisBackend.from_url("r9", URL, socket_timeout_s=5.0)
    yield backend
    backend.close()


def item(body: bytes = b"b", priority: int = 1, run_after: int | None = None, attempts: int = 3,
         status: str = "") -> EnqueueItem:  # fmt: skip
    return EnqueueItem(body, priority, run_after, attempts, status)


def one(be: RedisBackend, local_id: int, priority: int = 1, body: bool = False) -> JobRecord:
    [rec] = be.lookup(Q, priority, [local_id], body)
    assert rec is not None
    return rec


def claim_one(be: RedisBackend, source: str = "w", attempts: int = 3) -> ClaimedJob:
    be.enqueue(Q, [item(attempts=attempts)])
    [job] = be.dequeue(Q, [1], 1, source).jobs
    return job


def counts(be: RedisBackend, priority: int = 1) -> tuple[int, int, int, int]:
    return (
        be.count(Q, priority, P, False) + be.count(Q, priority, P, True),
        be.count(Q, priority, R, False),
        be.count(Q, priority, S, False),
        be.count(Q, priority, F, False),
    )


# -- housekeeping ----------------------------------------------------------------


def test_protocol_ping_clock_and_queues(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    assert isinstance(be, ShardBackend)
    be.ping()
    sec, usec = raw.time()
    assert abs(be.now_ms() - (sec * 1000 + usec // 1000)) < 1000
    assert be.queue_names() == set()
    be.create_queue(Q, 3)
    be.create_queue(Q, 3)
    be.enqueue("other", [item()])
    assert be.queue_names() == {Q, "other"}
    be.delete_queue(Q)
    be.delete_queue(Q)
    assert be.queue_names() == {"other"}


def test_delete_queue_removes_every_key(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    be.create_queue(Q, 3)
    be.enqueue(Q, [item(priority=p) for p in (1, 2, 3, 7) for _ in range(700)])
    be.dequeue(Q, [1], 100, "w")
    [job] = be.dequeue(Q, [2], 1, "w").jobs
    be.ack_succeeded(Q, [AckItem(2, job.local_id, "w", "")])
    be.enqueue("keep", [item()])
    be.delete_queue(Q)
    assert [k for k in raw.scan_iter(match=f"pl:{Q}:*")] == []
    assert raw.dbsize() == 7  # pl:layout, pl:queues, pl:deleted and the 4 keys of "keep"
    assert raw.smembers(keys.DELETED_QUEUES) == {Q.encode()}


def test_unreachable_server_is_shard_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = RedisBackend.from_url("gone", f"redis://127.0.0.1:{port}/0", socket_timeout_s=0.5)
    with pytest.raises(ShardUnavailable, match="gone") as err:
        down.enqueue(Q, [item()])
    assert isinstance(err.value.__cause__, redis.ConnectionError)
    with pytest.raises(ShardUnavailable):
        down.ping()


def test_silent_server_times_out_as_shard_unavailable() -> None:
    with socket.socket() as listener:  # accepts (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        slow = RedisBackend.from_url("mute", f"redis://127.0.0.1:{port}/0", socket_timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(ShardUnavailable) as err:
            slow.count(Q, 1, P, False)
        assert isinstance(err.value.__cause__, redis.TimeoutError)
        assert time.monotonic() - started < 3  # no hidden retries


def test_other_errors_propagate(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    raw.set(keys.pending_key(Q, 1), "not a zset")
    with pytest.raises(StorageError, match="WRONGTYPE") as info:  # a PinLaterError, the driver's as its cause
        be.dequeue(Q, [1], 1, "w")
    assert isinstance(info.value.__cause__, redis.ResponseError)


def test_scripts_survive_script_flush(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    be.enqueue(Q, [item()])
    raw.script_flush()
    assert len(be.dequeue(Q, [1], 5, "w").jobs) == 1


# -- enqueue, dequeue, ack ----------------------------------------------------------


def test_enqueue_dequeue_ack_success(be: RedisBackend) -> None:
    before = be.now_ms()
    ids = be.enqueue(Q, [item(b"a", status="s0"), item(b"b")])
    assert ids == sorted(ids) and len(set(ids)) == 2
    rec = one(be, ids[0], body=True)
    assert (rec.state, rec.attempts_allowed, rec.attempts_remaining) == (P, 3, 3)
    assert rec.created_at_ms == rec.updated_at_ms == rec.run_after_ms >= before
    assert rec.body == b"a" and rec.claim is None and rec.custom_status == "s0"
    assert be.peek(Q, [1], 10).jobs[0] == ClaimedJob(ids[0], 1, b"a", 3, 3, "", None, rec.run_after_ms)

    jobs = be.dequeue(Q, [1], 10, "host:1").jobs
    assert [(j.local_id, j.body, j.attempts_remaining) for j in jobs] == [
        (ids[0], b"a", 3), (ids[1], b"b", 3),
    ]  # fmt: skip
    running = one(be, ids[0])
    assert running.state is R and running.claim == jobs[0].claim
    assert jobs[0].claim.endswith("@host:1") and running.updated_at_ms >= rec.updated_at_ms
    assert be.dequeue(Q, [1], 10, "host:1").jobs == []

    assert be.ack_succeeded(Q, [AckItem(1, i, "host:1", "+done") for i in ids]) == [True, True]
    done = one(be, ids[0])
    assert (done.state, done.claim, done.custom_status) == (S, None, "s0+done")
    assert done.updated_at_ms >= running.updated_at_ms
    assert counts(be) == (0, 0, 2, 0)


def test_enqueue_run_after_and_batch_of_mixed_priorities(be: RedisBackend) -> None:
    now = be.now_ms()
    ids = be.enqueue(Q, [item(priority=2), item(run_after=now + HOUR), item(priority=3)])
    assert one(be, ids[1]).run_after_ms == now + HOUR
    assert be.dequeue(Q, [1], 10, "w").jobs == []  # only a future job at priority 1
    assert [j.local_id for j in be.dequeue(Q, [2], 10, "w").jobs] == [ids[0]]
    assert [j.local_id for j in be.dequeue(Q, [3], 10, "w").jobs] == [ids[2]]


def test_priorities_are_independent(be: RedisBackend) -> None:
    a = be.enqueue(Q, [item(priority=1) for _ in range(3)])
    b = be.enqueue(Q, [item(priority=2) for _ in range(2)])
    assert len(be.dequeue(Q, [2], 10, "w").jobs) == 2
    assert counts(be, 1) == (3, 0, 0, 0) and counts(be, 2) == (0, 2, 0, 0)
    assert be.lookup(Q, 1, [b[0]], False) == [None]
    assert be.ack_succeeded(Q, [AckItem(1, b[0], "w", "")]) == [False]  # wrong priority
    assert be.ack_succeeded(Q, [AckItem(2, b[0], "w", "")]) == [True]
    assert counts(be, 1) == (3, 0, 0, 0) and counts(be, 2) == (0, 1, 1, 0)
    assert [j.local_id for j in be.dequeue(Q, [1], 10, "w").jobs] == a


def test_ack_failure_with_retries_left(be: RedisBackend) -> None:
    job = claim_one(be, attempts=3)
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "w", "e1", 5_000)]) == [True]
    rec = one(be, job.local_id)
    assert (rec.state, rec.attempts_remaining, rec.claim, rec.custom_status) == (P, 2, None, "e1")
    assert rec.run_after_ms == rec.updated_at_ms + 5_000
    assert be.dequeue(Q, [1], 1, "w").jobs == []  # not due yet
    assert be.count(Q, 1, P, True) == 1


def test_ack_failure_at_last_attempt(be: RedisBackend) -> None:
    job = claim_one(be, attempts=1)
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "w", "", 5_000)]) == [True]
    rec = one(be, job.local_id)
    assert (rec.state, rec.attempts_remaining, rec.claim) == (F, 0, None)
    assert counts(be) == (0, 0, 0, 1)


def test_ack_failure_takes_the_policy_delay_by_retry_number(be: RedisBackend) -> None:
    job = claim_one(be, attempts=5)
    for expected_delay in (1_000, 2_000, 2_000):  # past the table's end its last entry holds
        assert be.ack_failed(Q, [FailItem(1, job.local_id, "w", "")], [1_000, 2_000]) == [True]
        rec = one(be, job.local_id)
        assert rec.state is P and rec.run_after_ms - rec.updated_at_ms == expected_delay
        be._r.zadd(keys.pending_key(Q, 1), {keys.member(job.local_id): 0})  # due now
        [job] = be.dequeue(Q, [1], 1, "w").jobs
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "w", "", 7)], [1_000]) == [True]
    rec = one(be, job.local_id)
    assert rec.run_after_ms - rec.updated_at_ms == 7 and rec.attempts_remaining == 1


def test_stale_acks_change_nothing(be: RedisBackend) -> None:
    job = claim_one(be, "a")
    snap = one(be, job.local_id, body=True)
    assert be.ack_succeeded(Q, [AckItem(1, job.local_id, "b", "x")]) == [False]
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "b", "x", 0)]) == [False]
    assert be.checkpoint(Q, [CheckpointItem(1, job.local_id, "b", b"n", True, 1, 9, "x")]) == [False]
    assert be.ack_succeeded(Q, [AckItem(1, 999, "a", "x")]) == [False]  # unknown id
    assert one(be, job.local_id, body=True) == snap

    # Timed out and re-claimed by another source: the old claimer is stale.
    assert be.expire_claims(Q, 1, 0, 10).repended == 1
    [again] = be.dequeue(Q, [1], 1, "b").jobs
    assert again.local_id == job.local_id and again.claim != job.claim
    snap = one(be, job.local_id)
    assert be.ack_succeeded(Q, [AckItem(1, job.local_id, "a", "x")]) == [False]
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "a", "x", 0)]) == [False]
    assert one(be, job.local_id) == snap

    # Not RUNNING any more (already acknowledged): stale too.
    assert be.ack_succeeded(Q, [AckItem(1, job.local_id, "b", "")]) == [True]
    snap = one(be, job.local_id)
    assert be.ack_succeeded(Q, [AckItem(1, job.local_id, "b", "again")]) == [False]
    assert be.ack_failed(Q, [FailItem(1, job.local_id, "b", "", 0)]) == [False]
    assert one(be, job.local_id) == snap


def test_batch_ack_mixes_applied_and_stale(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(priority=p) for p in (1, 2, 1)])
    be.dequeue(Q, [1], 10, "w")
    be.dequeue(Q, [2], 10, "w")
    acks = [AckItem(1, ids[0], "w", ""), AckItem(2, ids[1], "x", ""), AckItem(2, ids[1], "w", "")]
    assert be.ack_succeeded(Q, acks) == [True, False, True]
    assert be.ack_failed(Q, [FailItem(1, ids[2], "w", "", 0), FailItem(1, ids[0], "w", "", 0)]) == [
        True,
        False,
    ]


# -- checkpoint ---------------------------------------------------------------------


def test_checkpoint_heartbeat(be: RedisBackend, raw: redis.Redis[bytes]) -> None:
    job = claim_one(be)
    first = one(be, job.local_id)
    time.sleep(0.005)
    assert be.checkpoint(Q, [CheckpointItem(1, job.local_id, "w", None, False, None, None, None)])
    rec = one(be, job.local_id, body=True)
    assert rec.state is R and rec.claim == job.claim and rec.body == b"b"
    assert rec.updated_at_ms > first.updated_at_ms and rec.attempts_remaining == 3
    score = raw.zscore(keys.running_key(Q, 1), keys.member(job.local_id))
    assert score == rec.updated_at_ms  # expire_claims measures from the heartbeat


def test_checkpoint_new_body_attempts_status_and_stored_run_after(be: RedisBackend) -> None:
    job = claim_one(be)
    now = be.now_ms()
    cp = CheckpointItem(1, job.local_id, "w", b"page2", False, now + HOUR, 7, "p2;")
    assert be.checkpoint(Q, [cp]) == [True]
    rec = one(be, job.local_id, body=True)
    assert (rec.state, rec.body, rec.attempts_allowed, rec.attempts_remaining) == (R, b"page2", 7, 7)
    assert rec.custom_status == "p2;" and rec.run_after_ms == now + HOUR
    assert be.checkpoint(Q, [CheckpointItem(1, job.local_id, "w", None, False, None, None, "p3;")])
    assert one(be, job.local_id).custom_status == "p3;p2;"


def test_checkpoint_move_to_pending_spends_no_attempt(be: RedisBackend) -> None:
    job = claim_one(be, attempts=2)
    assert be.checkpoint(Q, [CheckpointItem(1, job.local_id, "w", None, True, None, None, None)])
    rec = one(be, job.local_id)
    assert (rec.state, rec.claim, rec.attempts_remaining) == (P, None, 2)
    assert rec.run_after_ms == rec.updated_at_ms
    [again] = be.dequeue(Q, [1], 1, "w2").jobs
    assert again.local_id == job.local_id and again.attempts_remaining == 2


def test_checkpoint_move_to_pending_later_with_new_attempts(be: RedisBackend) -> None:
    job = claim_one(be, attempts=2)
    later = be.now_ms() + HOUR
    cp = CheckpointItem(1, job.local_id, "w", b"next", True, later, 5, None)
    assert be.checkpoint(Q, [cp]) == [True]
    rec = one(be, job.local_id, body=True)
    assert (rec.state, rec.run_after_ms, rec.attempts_allowed, rec.attempts_remaining) == (
        P, later, 5, 5,
    )  # fmt: skip
    assert rec.body == b"next" and be.count(Q, 1, P, True) == 1
    assert be.checkpoint(Q, [CheckpointItem(1, job.local_id, "w", None, False, None, None, None)]) == [False]


# -- monitor operations ----------------------------------------------------------------


def test_expire_claims_repends_and_fails(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(attempts=3), item(attempts=1), item(attempts=2)])
    be.dequeue(Q, [1], 3, "w")
    assert be.expire_claims(Q, 1, HOUR, 10) == ExpiredClaims(0, 0)  # nothing old enough
    got = be.expire_claims(Q, 1, 0, 10)
    assert (got.repended, got.failed) == (2, 1)
    a, b, c = (one(be, i) for i in ids)
    assert (a.state, a.attempts_remaining, a.claim) == (P, 2, None)
    assert a.run_after_ms == a.updated_at_ms
    assert (b.state, b.attempts_remaining) == (F, 0)
    assert (c.state, c.attempts_remaining) == (P, 1)
    assert counts(be) == (2, 0, 0, 1)


def test_expire_claims_limit_and_heartbeat(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item() for _ in range(5)])
    be.dequeue(Q, [1], 5, "w")
    # Claims 1 s old against an 800 ms timeout; the heartbeat stays fresh
    # unless the next calls stall 800 ms (50 ms was too little on a busy machine).
    time.sleep(1.0)
    be.checkpoint(Q, [CheckpointItem(1, ids[4], "w", None, False, None, None, None)])
    assert be.expire_claims(Q, 1, 800, 2) == ExpiredClaims(2, 0)  # limit, oldest first
    assert be.expire_claims(Q, 1, 800, 10) == ExpiredClaims(2, 0)  # ids[4] heartbeated
    assert one(be, ids[4]).state is R


def test_gc(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(attempts=1) for _ in range(4)])
    jobs = be.dequeue(Q, [1], 4, "w").jobs
    be.ack_succeeded(Q, [AckItem(1, j.local_id, "w", "") for j in jobs[:3]])
    be.ack_failed(Q, [FailItem(1, jobs[3].local_id, "w", "", 0)])
    assert be.gc(Q, 1, S, HOUR, 10) == 0
    assert be.gc(Q, 1, S, 0, 2) == 2
    assert be.gc(Q, 1, S, 0, 10) == 1
    assert be.gc(Q, 1, F, 0, 10) == 1
    assert be.lookup(Q, 1, ids, False) == [None] * 4
    assert counts(be) == (0, 0, 0, 0)


def test_retry_failed(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(attempts=1) for _ in range(3)])
    for i in ids:  # fail them one by one: ids[2] fails last
        be.dequeue(Q, [1], 1, "w")
        be.ack_failed(Q, [FailItem(1, i, "w", "", 0)])
        time.sleep(0.002)
    later = be.now_ms() + HOUR
    assert be.retry_failed(Q, 1, 4, later, 2) == 2
    rec = one(be, ids[2])
    assert (rec.state, rec.attempts_allowed, rec.attempts_remaining, rec.run_after_ms) == (
        P, 4, 4, later,
    )  # fmt: skip
    assert one(be, ids[1]).state is P and one(be, ids[0]).state is F  # most recent first
    assert be.retry_failed(Q, 1, 2, None, 10) == 1
    assert [j.local_id for j in be.dequeue(Q, [1], 10, "w").jobs] == [ids[0]]
    assert be.retry_failed(Q, 1, 2, None, 10) == 0


def test_delete_by_ids_and_by_limit(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item() for _ in range(6)])
    be.dequeue(Q, [1], 1, "w")  # ids[0] is RUNNING
    assert be.delete(Q, 1, P, [ids[0], ids[1], 999], 0) == 1  # ids[0] is not PENDING
    assert be.lookup(Q, 1, [ids[0], ids[1]], False)[1] is None
    assert be.delete(Q, 1, P, None, 2) == 2
    assert be.delete(Q, 1, P, [], 5) == 0
    assert be.count(Q, 1, P, False) == 2
    assert be.delete(Q, 1, R, None, 10) == 1
    assert be.delete(Q, 1, P, None, 10) == 2
    assert counts(be) == (0, 0, 0, 0)


# -- reads ------------------------------------------------------------------------


def test_count_pending_now_vs_future(be: RedisBackend) -> None:
    now = be.now_ms()
    be.enqueue(Q, [item(), item(run_after=now - 5), item(run_after=now + HOUR)])
    assert be.count(Q, 1, P, False) == 2
    assert be.count(Q, 1, P, True) == 1
    be.dequeue(Q, [1], 1, "w")
    assert be.count(Q, 1, R, False) == be.count(Q, 1, R, True) == 1
    assert be.count(Q, 2, P, False) == 0


def test_lookup(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(b"x"), item(b"y")])
    be.dequeue(Q, [1], 1, "w")
    recs = be.lookup(Q, 1, [ids[1], 12345, ids[0]], True)
    assert recs[1] is None
    assert recs[0] is not None and recs[0].body == b"y" and recs[0].state is P
    assert recs[2] is not None and recs[2].state is R and recs[2].claim
    no_body = be.lookup(Q, 1, [ids[0]], False)[0]
    assert no_body is not None and no_body.body is None
    assert be.lookup("nosuchqueue", 1, [1], False) == [None]


def test_scan_pages_2500_equal_scores_exactly_once(be: RedisBackend) -> None:
    ids = be.enqueue(Q, [item(body=b"%d" % i) for i in range(2500)])
    assert len({one(be, i).run_after_ms for i in (ids[0], ids[-1])}) == 1  # one score
    seen: list[int] = []
    before: tuple[int, int] | None = None
    for limit in [97] * 1000:
        page = be.scan(Q, 1, P, False, before, limit, False)
        if not page:
            break
        assert all(r.body is None for r in page)
        seen += [r.local_id for r in page]
        before = (page[-1].sort_time_ms, page[-1].local_id)
    assert seen == sorted(ids, reverse=True)


def test_scan_order_cursor_states_and_bodies(be: RedisBackend) -> None:
    now = be.now_ms()
    runs = [now - 30, now - 10, now - 30, now - 20, now - 10, now + HOUR]
    ids = be.enqueue(Q, [item(body=b"%d" % i, run_after=r) for i, r in enumerate(runs)])
    due = sorted(((r, i) for r, i in zip(runs, ids, strict=True) if r <= now), key=lambda t: (-t[0], -t[1]))
    page = be.scan(Q, 1, P, False, None, 3, True)
    assert [(r.sort_time_ms, r.local_id) for r in page] == due[:3]
    assert page[0].body == b"%d" % ids.index(page[0].local_id)
    rest = be.scan(Q, 1, P, False, due[2], 10, True)
    assert [(r.sort_time_ms, r.local_id) for r in rest] == due[3:]
    assert [r.local_id for r in be.scan(Q, 1, P, True, None, 10, False)] == [ids[5]]

    be.dequeue(Q, [1], 2, "w")  # the two oldest run_afters
    running = be.scan(Q, 1, R, False, None, 10, False)
    assert {r.local_id for r in running} == {ids[0], ids[2]}
    assert all(r.sort_time_ms == r.updated_at_ms and r.claim for r in running)
    assert be.scan(Q, 1, S, False, None, 10, False) == []


def test_two_threads_never_get_the_same_job(be: RedisBackend) -> None:
    total = 3000
    for _ in range(total // 500):
        be.enqueue(Q, [item() for _ in range(500)])
    got: dict[str, list[int]] = {"a": [], "b": []}
    backends = {"a": be, "b": RedisBackend.from_url("r9", URL)}
    barrier = threading.Barrier(2)

    def worker(name: str) -> None:
        barrier.wait()
        while True:
            jobs = backends[name].dequeue(Q, [1], 7, name).jobs
            if not jobs:
                return
            got[name] += [j.local_id for j in jobs]

    threads = [threading.Thread(target=worker, args=(n,)) for n in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    backends["b"].close()
    assert not set(got["a"]) & set(got["b"])
    assert len(got["a"]) + len(got["b"]) == total
    assert got["a"] and got["b"]


def test_custom_status_cap(be: RedisBackend) -> None:
    job = claim_one(be)
    assert be.ack_succeeded(Q, [AckItem(1, job.local_id, "w", "x" * (CUSTOM_STATUS_MAX + 10) + "!")])
    status = one(be, job.local_id).custom_status
    assert len(status) == CUSTOM_STATUS_MAX and status.endswith("x!")


def test_any_text_round_trips_through_the_json_batches(be: RedisBackend) -> None:
    odd = 'é\u2028"\\\n\x00{}[]'
    [i] = be.enqueue(Q, [item(body=b"\x00\xff", status=odd)])
    [_job] = be.dequeue(Q, [1], 1, "hôst@1").jobs
    assert be.checkpoint(Q, [CheckpointItem(1, i, "hôst@1", b"\x00n", False, None, None, "€")]) == [True]
    assert be.ack_failed(Q, [FailItem(1, i, "hôst@1", odd, 0)]) == [True]
    rec = one(be, i, body=True)
    assert rec.custom_status == "€" + odd + odd and rec.body == b"\x00n"


# The prelude's record writer, with Redis's struct library and without it
# (the plain-Lua path fakeredis runs): the same bytes, read back the same by
# the scripts and by redis_record.
CODEC_CHECK = """
local out = {}
for _, s in ipairs(cjson.decode(ARGV[1])) do
  local j = {state = s[1], allowed = s[2], left = s[3], created = s[4], updated = s[5], run_after = s[6],
    claim = s[7], status = s[8], trace = s[9]}
  local v = job_value(j, 'the body')
  local r = read_job(v)
  -- Integers as %d text: cjson would round them to 14 digits.
  out[#out + 1] = {v, cjson.encode({int(r.state), int(r.allowed), int(r.left), int(r.created), int(r.updated),
    int(r.run_after), r.claim or '', r.status, r.trace, string.sub(v, r.body_at)})}
end
return out
"""
WITH_STRUCT = "if type(struct) == 'table' then"


def test_struct_and_plain_lua_write_and_read_the_same_records(raw: redis.Redis[bytes]) -> None:
    import json

    from pinlater.stores.redis import record as redis_record
    from pinlater.stores.redis.loader import lua_source, used_prelude

    prelude = used_prelude(lua_source("pinlater.stores.redis", "_prelude"), CODEC_CHECK)
    assert prelude.count(WITH_STRUCT) == 1
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    samples = [
        [0, 1, 1, 0, 0, 0, "", "", ""],
        [1, 65_535, 65_535, 2**48 - 1, 2**48 - 2, 2**53 - 1, "0123456789abcdef@w\u00e9", "st\u00e4tus", trace],
        [3, 1000, 0, 1_763_860_000_000, 1_763_860_000_123, 1_763_863_600_000, "", "x" * 4000, trace],
        [2, 7, 3, 1_763_860_000_000, 1_763_860_000_001, 255, "", "", ""],
        [0, 2, 2, 1, 1, 1, "", "", "t" * 255],
    ]
    arg = json.dumps(samples)
    with_struct = raw.register_script(prelude + CODEC_CHECK)(args=[arg])
    plain = raw.register_script(prelude.replace(WITH_STRUCT, "if false then") + CODEC_CHECK)(args=[arg])
    assert with_struct == plain
    for sample, (value, read) in zip(samples, with_struct, strict=True):
        state, allowed, left, created, updated, run_after, claim, status, job_trace = sample
        numbers = [str(n) for n in (state, allowed, left, created, updated, run_after)]
        assert json.loads(read) == [*numbers, claim if state == 1 else "", status, job_trace, "the body"]
        rec = redis_record.decode(1, 1, value, include_body=True)
        assert rec is not None
        assert (rec.state, rec.attempts_allowed, rec.attempts_remaining) == (state, allowed, left)
        assert (rec.created_at_ms, rec.updated_at_ms, rec.run_after_ms) == (created, updated, run_after)
        assert (rec.claim or "", rec.custom_status, rec.body) == (claim if state == 1 else "", status, b"the body")


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_trace_is_stored_from_layout_4_on_and_kept_by_every_transition(raw: redis.Redis[bytes]) -> None:
    """Layout-3 code would read a trace section as body, so a shard still
    recorded at layout 3 gets none; at layout 4 a job keeps its trace
    beside its claim and custom status through fail, retry and checkpoint,
    and its body stays whole."""
    raw.sadd(keys.QUEUES, "older")
    raw.set(keys.SHARD_LAYOUT, 3)
    old = RedisBackend.from_url("r9", URL)
    try:
        old.enqueue(Q, [EnqueueItem(b"body", 1, None, 3, "status", TRACE)])
        [job] = old.dequeue(Q, [1], 1, "w").jobs
        assert (job.body, job.trace) == (b"body", None)
    finally:
        old.close()

    raw.set(keys.SHARD_LAYOUT, 4)  # what `pinlater migrate` records
    be = RedisBackend.from_url("r9", URL)
    try:
        body = bytes(range(256))
        [local_id] = be.enqueue(Q, [EnqueueItem(body, 1, None, 3, "status", TRACE)])
        [job] = be.dequeue(Q, [1], 1, "w").jobs
        assert (job.local_id, job.body, job.trace) == (local_id, body, TRACE)
        assert abs(job.run_after_ms - be.now_ms()) < 5_000
        rec = one(be, local_id, body=True)
        assert (rec.body, rec.custom_status, rec.claim) == (body, "status", job.claim)
        assert be.ack_failed(Q, [FailItem(1, local_id, "w", " failed", delay_ms=0)]) == [True]
        [again] = be.dequeue(Q, [1], 1, "w").jobs
        assert (again.body, again.trace) == (body, TRACE)
        assert be.checkpoint(Q, [CheckpointItem(1, local_id, "w", b"new", True, None, None, None)]) == [True]
        [third] = be.dequeue(Q, [1], 1, "w").jobs
        assert (third.body, third.trace) == (b"new", TRACE)
        assert one(be, local_id, body=True).custom_status == "status failed"
    finally:
        be.close()
