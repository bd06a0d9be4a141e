"""The Redis backend's maintenance and reads against a real Redis server
(gc, retry, delete, count, lookup, scan, concurrent dequeues) and its job
records (any text, the Lua codecs, traces); its transitions are in
``test_redis_backend``. Same server and db as there.
"""

from __future__ import annotations

import threading
import time

import redis

from pinlater.stores.base import (
    CUSTOM_STATUS_MAX,
    AckItem,
    CheckpointItem,
    EnqueueItem,
    FailItem,
    ScanQuery,
)
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.redis_support import URL, F, P, Q, R, S, claim_one, counts, item, one

HOUR = 3_600_000


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
        page = be.scan(ScanQuery(Q, 1, P, False, before, limit, False))
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
    page = be.scan(ScanQuery(Q, 1, P, False, None, 3, True))
    assert [(r.sort_time_ms, r.local_id) for r in page] == due[:3]
    assert page[0].body == b"%d" % ids.index(page[0].local_id)
    rest = be.scan(ScanQuery(Q, 1, P, False, due[2], 10, True))
    assert [(r.sort_time_ms, r.local_id) for r in rest] == due[3:]
    assert [r.local_id for r in be.scan(ScanQuery(Q, 1, P, True, None, 10, False))] == [ids[5]]

    be.dequeue(Q, [1], 2, "w")  # the two oldest run_afters
    running = be.scan(ScanQuery(Q, 1, R, False, None, 10, False))
    assert {r.local_id for r in running} == {ids[0], ids[2]}
    assert all(r.sort_time_ms == r.updated_at_ms and r.claim for r in running)
    assert be.scan(ScanQuery(Q, 1, S, False, None, 10, False)) == []


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
# the scripts and by the record module.
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


def test_a_trace_is_kept_by_every_transition(raw: redis.Redis[bytes]) -> None:
    """A job keeps its trace beside its claim and custom status through
    fail, retry and checkpoint, and its body stays whole."""
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
