"""Fast tests of the Redis backend's Lua scripts on fakeredis (with lupa).

fakeredis runs the real .lua files, including ``redis.call('TIME')``, so the
transition logic, argument validation, status caps, scan cursors and the
token bucket are all exercised here. What fakeredis cannot show (EVALSHA
against a real script cache, connection failures, real concurrency) is in
tests/integration/test_redis_backend*.py.
"""

from __future__ import annotations

import fakeredis
import pytest
import redis

from pinlater.errors import StorageError
from pinlater.states import JobState
from pinlater.stores.base import (
    CUSTOM_STATUS_MAX,
    AckItem,
    CheckpointItem,
    EnqueueItem,
    FailItem,
    ScanQuery,
    ShardBackend,
)
from pinlater.stores.control import ControlStore
from pinlater.stores.redis import keys
from pinlater.stores.redis.control import RedisControlStore
from pinlater.stores.redis.scripts import JOB_SCRIPTS, job_script_source
from pinlater.stores.redis.shard import RedisBackend

Q = "q"
HOUR = 3_600_000


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


@pytest.fixture
def be(client: fakeredis.FakeRedis) -> RedisBackend:
    return RedisBackend("f1", client)


def item(body: bytes = b"b", priority: int = 1, run_after: int | None = None, attempts: int = 3,
         status: str = "") -> EnqueueItem:  # fmt: skip
    return EnqueueItem(body, priority, run_after, attempts, status)


def test_is_a_shard_backend_and_control_store(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    assert isinstance(be, ShardBackend)
    assert isinstance(RedisControlStore(client), ControlStore)


def test_every_script_starts_with_its_header() -> None:
    from pinlater.stores.redis.loader import lua_source

    for name in [*JOB_SCRIPTS, "_prelude"]:
        first = lua_source("pinlater.stores.redis", name).splitlines()[0]
        assert first.startswith(f"-- {name}"), name
        if name != "_prelude":
            header = lua_source("pinlater.stores.redis", name).split("\nlocal ", 1)[0]
            assert "KEYS[" in header and "ARGV[" in header, name
    for name in ("rate_acquire", "rate_release"):
        assert lua_source("pinlater.stores.redis", name).startswith(f"-- {name}")
    assert "local function now_ms" in job_script_source("dequeue")


def test_key_layout(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    [i] = be.enqueue(Q, [item(priority=2, body=b"the body", status="st")])
    assert keys.member(i) == b"\x01\x01"
    assert client.zrange(f"pl:{Q}:p2:pending", 0, -1) == [keys.member(i)]
    assert client.get(f"pl:{Q}:ids") == b"1"
    assert client.smembers("pl:queues") == {Q.encode()}
    assert client.smembers(f"pl:{Q}:prios") == {b"2"}
    # One field per job: a 24-byte header, the status (length first), the body.
    [(field, value)] = client.hgetall(f"pl:{Q}:p2:jobs").items()
    assert field == keys.member(i)
    assert value[0] == 8 and value[1:5] == bytes([0, 3, 0, 3])  # PENDING + status flag; 3 attempts
    assert value[24:] == b"\x00\x02st" + b"the body"
    assert sorted(client.keys("*")) == sorted(
        k.encode() for k in ("pl:layout", "pl:queues", f"pl:{Q}:ids", f"pl:{Q}:prios", f"pl:{Q}:p2:pending",
                             f"pl:{Q}:p2:jobs")
    )


@pytest.mark.parametrize("local_id", [1, 255, 256, 65_535, 2**24, 2**40 - 1, 2**40, 2**53 - 1])
def test_members_sort_as_their_ids(local_id: int) -> None:
    m = keys.member(local_id)
    assert keys.member_id(m) == local_id
    if local_id > 1:
        assert keys.member(local_id - 1) < m
    assert m < keys.member(local_id + 1)
    assert (len(m) <= 6) == (local_id < 2**40)


def test_lua_and_python_members_agree(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    client.set(f"pl:{Q}:ids", 2**40 - 2)
    ids = be.enqueue(Q, [item(), item(), item()])
    assert ids == [2**40 - 1, 2**40, 2**40 + 1]
    assert client.zrange(f"pl:{Q}:p1:pending", 0, -1) == [keys.member(i) for i in ids]
    assert [j.local_id for j in be.dequeue(Q, [1], 10, "w").jobs] == ids


def test_enqueue_ids_increase_across_priorities_and_batches(be: RedisBackend) -> None:
    a = be.enqueue(Q, [item(priority=1), item(priority=3), item(priority=1)])
    b = be.enqueue(Q, [item(priority=2)])
    assert a == [1, 2, 3] and b == [4]
    assert [j.local_id for j in be.peek(Q, [1], 10).jobs] == [1, 3]


def test_enqueue_validation_stores_nothing(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    with pytest.raises(StorageError, match="redis shard f1: pinlater: enqueue: attempts_allowed") as info:
        be.enqueue(Q, [item(), item(attempts=0)])
    assert isinstance(info.value.__cause__, redis.ResponseError)
    assert client.keys("*") == [keys.SHARD_LAYOUT.encode()]  # only the new shard's layout record


def test_dequeue_orders_by_run_after_then_id(be: RedisBackend) -> None:
    now = be.now_ms()
    ids = be.enqueue(Q, [item(run_after=now - 10), item(run_after=now - 20), item(run_after=now - 10),
                         item(run_after=now + HOUR)])  # fmt: skip
    got = be.dequeue(Q, [1], 10, "w").jobs
    assert [j.local_id for j in got] == [ids[1], ids[0], ids[2]]
    assert len({j.claim for j in got}) == 1
    token, source = got[0].claim.split("@", 1)
    assert source == "w" and len(token) == 16 and int(token, 16) >= 0 and token == token.lower()


def test_ack_failed_guard_and_policy_delay(be: RedisBackend) -> None:
    [i] = be.enqueue(Q, [item(attempts=3)])
    be.dequeue(Q, [1], 1, "w")
    assert be.ack_failed(Q, [FailItem(1, i, "other", "", 500)], [9]) == [False]  # not its claim
    assert be.ack_failed(Q, [FailItem(1, i, "w", "x")], [500, 900]) == [True]
    [rec] = be.lookup(Q, 1, [i], False)
    assert rec is not None and rec.state is JobState.PENDING and rec.attempts_remaining == 2
    assert rec.run_after_ms == rec.updated_at_ms + 500 and rec.claim is None


def test_custom_status_caps_count_characters(be: RedisBackend) -> None:
    [i] = be.enqueue(Q, [item(status="é" * 10)])
    be.dequeue(Q, [1], 1, "w")
    tail = "ü" * (CUSTOM_STATUS_MAX - 5) + "end"
    assert be.checkpoint(Q, [CheckpointItem(1, i, "w", None, False, None, None, "€" * 3)]) == [True]
    assert be.ack_succeeded(Q, [AckItem(1, i, "w", tail)]) == [True]
    [rec] = be.lookup(Q, 1, [i], False)
    assert rec is not None
    # newest kept on append: the last 2 of ("€€€" + 10 é) and then the tail
    assert len(rec.custom_status) == CUSTOM_STATUS_MAX
    assert rec.custom_status == "éé" + tail


def test_prepend_keeps_leftmost(be: RedisBackend) -> None:
    [i] = be.enqueue(Q, [item(status="old")])
    be.dequeue(Q, [1], 1, "w")
    head = "ß" * (CUSTOM_STATUS_MAX - 1)
    be.checkpoint(Q, [CheckpointItem(1, i, "w", None, False, None, None, head)])
    [rec] = be.lookup(Q, 1, [i], False)
    assert rec is not None and rec.custom_status == head + "o"


def test_impossible_ids_are_stale_not_errors(be: RedisBackend) -> None:
    be.enqueue(Q, [item()])
    be.dequeue(Q, [1], 1, "w")
    assert be.ack_succeeded(Q, [AckItem(1, 0, "w", ""), AckItem(1, -3, "w", ""), AckItem(1, 1, "w", "")]) == [
        False,
        False,
        True,
    ]
    assert be.ack_failed(Q, [FailItem(1, -1, "w", "", 0)]) == [False]
    assert be.checkpoint(Q, [CheckpointItem(1, 0, "w", None, True, None, None, None)]) == [False]
    assert be.delete(Q, 1, JobState.SUCCEEDED, [0, -1], 10) == 0
    assert be.lookup(Q, 1, [0, -1], False) == [None, None]


def test_checkpoint_empty_new_body_is_a_new_body(be: RedisBackend) -> None:
    [i] = be.enqueue(Q, [item(body=b"full")])
    be.dequeue(Q, [1], 1, "w")
    be.checkpoint(Q, [CheckpointItem(1, i, "w", b"", False, None, None, None)])
    [rec] = be.lookup(Q, 1, [i], True)
    assert rec is not None and rec.body == b""


def test_binary_bodies_round_trip(be: RedisBackend) -> None:
    body = bytes(range(256)) * 4
    [_] = be.enqueue(Q, [item(body=body)])
    assert be.dequeue(Q, [1], 1, "w").jobs[0].body == body


def test_scan_cursor_with_ties_and_missing_cursor_job(be: RedisBackend) -> None:
    now = be.now_ms()
    # scores: three ties at now-5, two at now-9, one at now-1
    runs = [now - 5, now - 9, now - 5, now - 1, now - 9, now - 5]
    ids = be.enqueue(Q, [item(run_after=r) for r in runs])
    expected = sorted(zip(runs, ids, strict=True), key=lambda t: (-t[0], -t[1]))
    pages: list[tuple[int, int]] = []
    before = None
    while True:
        page = be.scan(ScanQuery(Q, 1, JobState.PENDING, False, before, 2, False))
        if not page:
            break
        pages += [(r.sort_time_ms, r.local_id) for r in page]
        before = (page[-1].sort_time_ms, page[-1].local_id)
    assert pages == expected
    # A cursor whose job is gone still splits exactly.
    t, gone = expected[2]
    assert be.delete(Q, 1, JobState.PENDING, [gone], 0) == 1
    rest = be.scan(ScanQuery(Q, 1, JobState.PENDING, False, (t, gone), 10, False))
    assert [(r.sort_time_ms, r.local_id) for r in rest] == expected[3:]


def test_scan_and_count_split_pending_by_now(be: RedisBackend) -> None:
    now = be.now_ms()
    due = be.enqueue(Q, [item(run_after=now - 1), item()])
    fut = be.enqueue(Q, [item(run_after=now + HOUR), item(run_after=now + 2 * HOUR)])
    assert be.count(Q, 1, JobState.PENDING, False) == 2
    assert be.count(Q, 1, JobState.PENDING, True) == 2
    assert [r.local_id for r in be.scan(ScanQuery(Q, 1, JobState.PENDING, True, None, 10, False))] == fut[::-1]
    assert [r.local_id for r in be.scan(ScanQuery(Q, 1, JobState.PENDING, False, None, 10, False))] == due[::-1]


def test_delete_queue_in_small_steps(
    be: RedisBackend, client: fakeredis.FakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pinlater.stores.redis.shard as mod

    monkeypatch.setattr(mod, "DELETE_QUEUE_BATCH", 3)
    be.create_queue(Q, 2)
    be.enqueue(Q, [item(priority=p) for p in (1, 2, 3, 1, 2, 3, 1)])
    be.dequeue(Q, [1], 2, "w")
    be.enqueue("other", [item()])
    be.delete_queue(Q)
    assert {k.decode() for k in client.keys("*")} == {
        "pl:layout", "pl:queues", "pl:deleted",
        "pl:other:ids", "pl:other:prios", "pl:other:p1:pending", "pl:other:p1:jobs",
    }  # fmt: skip
    assert be.queue_names() == {"other"}
    be.delete_queue(Q)  # idempotent


def test_delete_queue_script_waits_for_unlisted_priority(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    be.enqueue(Q, [item(priority=5)])
    script = be._scripts["delete_queue"]
    ks = ["pl:queues", keys.prios_key(Q), keys.ids_key(Q), keys.DELETED_QUEUES]
    # The client saw no priorities: the script must not drop the queue.
    assert script(keys=ks, args=[Q, 10], client=client) == 1
    assert client.exists(keys.pending_key(Q, 5))


def test_bad_group_index_is_rejected_before_writes(be: RedisBackend, client: fakeredis.FakeRedis) -> None:
    script = be._scripts["ack_succeeded"]
    with pytest.raises(redis.ResponseError, match="bad group"):
        script(keys=["a", "b", "c"], args=[10, '[[2, 1, "w", ""]]'], client=client)
    with pytest.raises(redis.ResponseError, match="bad id"):
        script(keys=["a", "b", "c"], args=[10, '[[1, 1.5, "w", ""]]'], client=client)
    assert client.keys("*") == []


# -- token bucket ----------------------------------------------------------------


@pytest.fixture
def control(client: fakeredis.FakeRedis) -> RedisControlStore:
    return RedisControlStore(client)


def test_bucket_starts_full_and_grants_whole_tokens(control: RedisControlStore, client: fakeredis.FakeRedis) -> None:
    assert control.acquire("b", 10, 1.0, 3.5) == 3
    assert float(client.hget(keys.rate_key("b"), "tokens") or 0) == pytest.approx(0.5, abs=0.01)
    assert control.acquire("b", 10, 1.0, 3.5) == 0
    assert 0 < client.pttl(keys.rate_key("b")) <= 60_000


def test_bucket_keeps_fractions_and_refills_on_server_clock(
    control: RedisControlStore, client: fakeredis.FakeRedis
) -> None:
    sec, usec = client.time()
    now = sec * 1000 + usec // 1000
    # 0.5 tokens 60 s ago at 0.01/s: 1.1 now, so one whole token, ~0.1 kept.
    # A slow rate, so that a stall before the script runs (loading Lua on a
    # busy machine) adds a hundredth of a token a second, not ten.
    client.hset(keys.rate_key("b"), mapping={"tokens": "0.5", "ts": str(now - 60_000)})
    assert control.acquire("b", 5, 0.01, 100.0) == 1
    left = float(client.hget(keys.rate_key("b"), "tokens") or 0)
    assert 0.09 <= left < 0.5


def test_bucket_zero_rate_grants_nothing(control: RedisControlStore, client: fakeredis.FakeRedis) -> None:
    assert control.acquire("b", 5, 0.0, 10.0) == 0
    assert not client.exists(keys.rate_key("b"))


def test_bucket_ttl_covers_slow_refill(control: RedisControlStore, client: fakeredis.FakeRedis) -> None:
    control.acquire("slow", 1, 0.01, 2.0)  # 200 s to refill
    assert client.pttl(keys.rate_key("slow")) > 190_000


def test_release_caps_at_burst(control: RedisControlStore, client: fakeredis.FakeRedis) -> None:
    control.release("b", 3, 5.0)  # missing bucket is full: nothing to do
    assert not client.exists(keys.rate_key("b"))
    assert control.acquire("b", 4, 1.0, 5.0) == 4
    control.release("b", 2, 5.0)
    assert float(client.hget(keys.rate_key("b"), "tokens") or 0) == pytest.approx(3.0, abs=0.05)
    control.release("b", 10, 5.0)
    assert float(client.hget(keys.rate_key("b"), "tokens") or 0) == 5.0


def test_one_job_twice_in_a_batch_acks_once(be: RedisBackend) -> None:
    """A batch reads its jobs together; an item after one that changed its
    job must still see the change, as if the items ran one by one."""
    ids = be.enqueue(Q, [item(priority=1), item(priority=2)])
    be.dequeue(Q, [1, 2], 10, "w")
    items = [AckItem(1, ids[0], "w", "a"), AckItem(2, ids[1], "w", ""), AckItem(1, ids[0], "w", "b")]
    assert be.ack_succeeded(Q, items) == [True, True, False]
    [rec] = be.lookup(Q, 1, [ids[0]], False)
    assert rec is not None and rec.state is JobState.SUCCEEDED and rec.custom_status == "a"
    assert be.count(Q, 1, JobState.RUNNING, False) == 0 and be.count(Q, 1, JobState.SUCCEEDED, False) == 1
