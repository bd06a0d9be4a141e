"""The Redis backend against a real Redis server.

Uses db 9 of the first local test Redis (``scripts/services``, port
16379), flushed before each test. If that server does not answer, the
fixture starts it with ``scripts/services start-redis`` and fails loudly if
it still does not answer: these tests never skip.
"""

from __future__ import annotations

import socket
import time

import pytest
import redis

from pinlater.errors import StorageError
from pinlater.stores.base import (
    AckItem,
    CheckpointItem,
    ClaimedJob,
    EnqueueItem,
    ExpiredClaims,
    FailItem,
    ShardBackend,
    ShardUnavailable,
)
from pinlater.stores.redis import keys
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.redis_support import F, P, Q, R, S, claim_one, counts, item, one
from tests.servers import PrivateRedis, redis_url

HOUR = 3_600_000


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


def test_running_jobs_are_counted_from_an_index_of_a_few_bytes_a_job(
    be: RedisBackend, raw: redis.Redis[bytes]
) -> None:
    """A capped queue's claims are counted on every monitor pass: from the
    owners index, not by copying every running job's body. Every way out of
    RUNNING drops a job's entry, so the index holds the running jobs only.
    A queue without a cap (``counted`` False) keeps no index."""
    owners, running = f"pl:{Q}:p1:owners", f"pl:{Q}:p1:running"
    big = b"x" * 200_000
    be.enqueue(Q, [EnqueueItem(big, 1, None, 3, "")])
    [plain] = be.dequeue(Q, [1], 1, "w", token="5555555555555555").jobs
    assert not raw.exists(owners)
    assert be.running_owners(Q, 1) == {("55555555", ""): 1}  # read from the job
    assert be.delete(Q, 1, R, [plain.local_id], 10) == 1
    ids = be.enqueue(Q, [EnqueueItem(big, 1, None, 3, "", key=k) for k in ("K", "K", "", "", "", "")])
    be.dequeue(Q, [1], 4, "w", token="0123456789abcdef", counted=True)
    be.dequeue(Q, [1], 2, "w", token="fedcba9876543210", counted=True)
    marks = raw.hgetall(owners)
    assert set(marks) == set(raw.zrange(running, 0, -1)) == {keys.member(i) for i in ids}
    assert sorted(marks.values()) == sorted([b"0123456789abcdef\0K"] * 2 + [b"0123456789abcdef\0"] * 2
                                            + [b"fedcba9876543210\0"] * 2)
    assert be.running_owners(Q, 1) == {("01234567", "K"): 2, ("01234567", ""): 2, ("fedcba98", ""): 2}
    # What the count reads is the index: an entry changed behind its back shows.
    raw.hset(owners, keys.member(ids[0]), b"9999999999999999\0Z")
    assert be.running_owners(Q, 1) == {("99999999", "Z"): 1, ("01234567", "K"): 1, ("01234567", ""): 2,
                                       ("fedcba98", ""): 2}
    # A job claimed before the index was kept is read from its job.
    raw.hdel(owners, keys.member(ids[0]), keys.member(ids[5]))
    assert be.running_owners(Q, 1) == {("01234567", "K"): 2, ("01234567", ""): 2, ("fedcba98", ""): 2}
    # Every way out of RUNNING drops the entry.
    a, b, c, d, e = ids[1:]
    assert be.ack_succeeded(Q, [AckItem(1, a, "w", "")]) == [True]
    assert be.ack_failed(Q, [FailItem(1, b, "w", "", 0)]) == [True]
    assert be.checkpoint(Q, [CheckpointItem(1, c, "w", None, True, None, None, None)]) == [True]
    assert be.checkpoint(Q, [CheckpointItem(1, d, "w", None, False, None, None, None)]) == [True]  # stays
    assert [x.state for x in be.cancel(Q, 1, [d], "")] == [R]
    assert be.delete(Q, 1, R, [e], 10) == 1
    assert be.running_owners(Q, 1) == {("01234567", "K"): 1}
    assert raw.hlen(owners) == 0  # the job without an entry ids[0] is the one left
    be.dequeue(Q, [1], 10, "w", token="aaaaaaaa00000000", counted=True)  # b and c, back in PENDING
    assert set(raw.hgetall(owners)) == set(raw.zrange(running, 0, -1)) - {keys.member(ids[0])}
    time.sleep(0.005)
    be.expire_claims(Q, 1, 0, 100)
    assert raw.zcard(running) == 0 and not raw.exists(owners)


def test_lane_keys_looks_at_lanes_by_its_limit_not_by_the_priorities_or_the_empty_lanes(
    private_redis: PrivateRedis,
) -> None:
    """Lanes served empty stay in turn until a dequeue meets them, and any
    number of priorities may hold them: one call looks at 4 * limit + 16 of
    them at most, over all priorities. Counted by the server's command
    statistics, so on a Redis of this module's own, which no other test's
    commands reach."""
    url = redis_url(private_redis.port, 0)
    own, raw = RedisBackend.from_url("own", url, socket_timeout_s=5.0), redis.Redis.from_url(url)
    try:
        raw.flushdb()
        own.create_queue(Q, 5)
        for p in range(1, 6):
            own.enqueue(Q, [EnqueueItem(b"-", p, None, 2, "", key=f"k{i}") for i in range(100)])
            assert own.delete(Q, p, P, None, 1000) == 100  # the lanes stay in turn, empty
        raw.config_resetstat()
        assert own.lane_keys(Q, [1, 2, 3, 4, 5], 5) == []
        looked = raw.info("commandstats")["cmdstat_zrangebyscore"]["calls"]
        assert looked <= 4 * 5 + 16 + 5, looked  # the lanes looked at, and each priority's waits
    finally:
        own.close()
        raw.close()


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
