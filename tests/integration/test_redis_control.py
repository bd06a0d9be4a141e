"""The Redis control store (queue configs, token buckets) against a real
Redis server (db 9 of the first local test Redis, flushed before each test;
started if it does not answer: these tests never skip)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from pinlater.errors import ShardConnectionFailed, StorageError
from pinlater.queue_config import QueueConfig
from pinlater.stores.redis.control import RedisControlStore
from tests.integration.redis_support import URL

# -- control store --------------------------------------------------------------------


@pytest.fixture
def control(raw: redis.Redis[bytes]) -> Iterator[RedisControlStore]:
    store = RedisControlStore.from_url(URL, socket_timeout_s=5.0)
    yield store
    store.close()


def test_control_queue_configs(control: RedisControlStore, raw: redis.Redis[bytes]) -> None:
    cfg = QueueConfig("emails", priorities=2, max_dequeue_rate=50.0)
    assert control.get_queue("emails") is None
    assert control.create_queue(cfg) is True
    assert control.create_queue(cfg.with_changes(priorities=5)) is False
    assert control.get_queue("emails") == cfg
    control.put_queue(cfg.with_changes(paused=True))
    assert control.list_queues() == {"emails": cfg.with_changes(paused=True)}
    assert raw.hget("plc:queues", "emails") == cfg.with_changes(paused=True).to_json().encode()
    control.acquire("emails", 1, 10.0, 5.0)
    control.delete_queue("emails")
    control.delete_queue("emails")
    assert control.list_queues() == {} and raw.keys("*") == [b"plc:layout"]


def test_control_batch_ends_of_two_batches_in_one_call(control: RedisControlStore, raw: redis.Redis[bytes]) -> None:
    # batch_end.lua gets the ends as one string and the descriptors as
    # another: each job's end is the character at its place, whatever
    # batch it is in.
    ones, twos = [f"q:s1:p1:{i}" for i in (1, 2, 3)], [f"q:s1:p1:{i}" for i in (4, 5)]
    for batch, jobs in (("one", ones), ("two", twos)):
        assert control.batch_create(batch, {"callback": ""}) and control.batch_join(batch, jobs)
    assert control.batch_seal("two") is False
    assert control.batch_end({ones[0]: "S", twos[0]: "F", "q:s1:p1:99": "S", twos[1]: "S", ones[1]: "F"}) == ["two"]
    assert raw.hgetall("plc:batch:one:jobs") == {ones[0].encode(): b"S", ones[1].encode(): b"F", ones[2].encode(): b""}
    assert raw.hgetall("plc:batch:two:jobs") == {twos[0].encode(): b"F", twos[1].encode(): b"S"}
    # Told again, with the other end: counted once, as first told.
    assert control.batch_end({ones[0]: "F", ones[1]: "S"}) == []
    one = control.batch_get("one")
    assert one is not None and (one.state, one.total, one.succeeded, one.failed) == ("open", 3, 1, 1)
    # An end that is neither S nor F (or not one character) is refused whole.
    for bad in ("X", "SS", ""):
        with pytest.raises(StorageError, match="bad ends"):
            control.batch_end({ones[2]: "S", twos[0]: bad})
    assert raw.hget("plc:batch:one:jobs", ones[2]) == b""
    # Texts that cannot be descriptors (the separator inside one, or empty)
    # are in no batch; the rest are told as usual.
    assert control.batch_end({"q:s1:p1:3 q:s1:p1:4": "S", "": "F", ones[2]: "S", f"{twos[0]} ": "S"}) == []
    assert raw.hget("plc:batch:one:jobs", ones[2]) == b"S" and raw.hget("plc:batch:two:jobs", twos[0]) == b"F"
    one = control.batch_get("one")
    assert one is not None and (one.total, one.succeeded, one.failed) == (3, 2, 1)


def test_control_batch_ends_past_one_hmget(control: RedisControlStore, raw: redis.Redis[bytes]) -> None:
    # batch_end.lua reads the jobs' batches and their ends 1,000 fields an
    # HMGET; a call of more takes several, and each job keeps its place.
    big, small = [f"q:s1:p1:{i}" for i in range(1, 2502)], [f"q:s1:p2:{i}" for i in range(1, 4)]
    for batch, jobs in (("big", big), ("small", small)):
        assert control.batch_create(batch, {"callback": ""}) and control.batch_join(batch, jobs)
    assert control.batch_seal("big") is False and control.batch_seal("small") is False  # sealed, not complete
    mixed = [*big[:1200], small[0], *big[1200:], small[1], "q:s1:p1:9999"]
    ends = {d: "F" if i % 7 == 0 else "S" for i, d in enumerate(mixed)}
    assert control.batch_end(ends) == ["big"]
    record = control.batch_get("big")
    failed = sum(1 for d in big if ends[d] == "F")
    assert record is not None and (record.state, record.total, record.succeeded, record.failed) == (
        "complete", 2501, 2501 - failed, failed)
    stored = raw.hgetall("plc:batch:big:jobs")
    assert {k.decode(): v.decode() for k, v in stored.items()} == {d: ends[d] for d in big}
    # small's two told jobs sit at places 1,200 and 2,502 (both "S"); its third is not told.
    assert (ends[small[0]], ends[small[1]]) == ("S", "S")
    small_record = control.batch_get("small")
    assert small_record is not None and (small_record.state, small_record.succeeded, small_record.failed) == (
        "sealed", 2, 0)
    assert raw.hget("plc:batch:small:jobs", small[2]) == b""


def test_control_token_bucket_on_real_clock(control: RedisControlStore, raw: redis.Redis[bytes]) -> None:
    assert control.acquire("b", 100, 20.0, 4.0) == 4  # starts full
    assert control.acquire("b", 100, 20.0, 4.0) == 0
    time.sleep(0.16)  # ~3.2 tokens at 20/s (a slow machine may see a few ms more)
    assert control.acquire("b", 100, 20.0, 4.0) in (3, 4)
    control.release("b", 2, 4.0)
    assert control.acquire("b", 2, 20.0, 4.0) == 2
    assert 0 < raw.pttl("plc:rate:b") <= 60_000
    assert control.acquire("paused", 5, 0.0, 4.0) == 0


def test_control_token_bucket_shared_by_threads(control: RedisControlStore) -> None:
    taken: list[int] = []
    stores = [RedisControlStore.from_url(URL) for _ in range(4)]

    def grab(store: RedisControlStore) -> None:
        for _ in range(50):
            taken.append(store.acquire("shared", 3, 0.001, 40.0))

    threads = [threading.Thread(target=grab, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sum(taken) == 40  # burst, and practically no refill at 0.001/s


def test_control_unreachable_is_connection_failed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisControlStore.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout_s=0.5)
    with pytest.raises(ShardConnectionFailed):
        store.acquire("b", 1, 1.0, 1.0)
    with pytest.raises(ShardConnectionFailed):
        store.get_queue("x")
