"""``pinlater migrate``'s Redis steps that add an index, on a real Redis,
through the CLI; each leaves exactly the keys this code would have
written, and is idempotent.

* Shard layout 5 (a priority that keeps lanes copies its jobs without a
  key into lane '', ``pl:{queue}:p{N}:lane:``) to 6 (it indexes its keyed
  pending jobs, ``pl:{queue}:p{N}:keyed``, and lane '' is the pending zset
  without them): the store is refused until the step has run.
* Control store layout 2 (no index of released and cancelled batches) to
  3 (``plc:batches:done``): the store stays usable before the step, and
  only after it are the batches that ended before it dropped when old.

Each old store is this code's own state as the old code left it (frozen:
do not change it when the layout changes again)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

import pinlater.stores.redis.upgrade as upgrade
from pinlater import Ack, Job, JobService, JobState
from pinlater.cli import main
from pinlater.settings import Settings, parse_shards
from pinlater.stores.layout import LayoutError
from pinlater.stores.redis.layout import REDIS_CONTROL, REDIS_SHARD
from pinlater.stores.redis.upgrade import index_done_batches, index_keyed_jobs
from tests.servers import REDIS_PORTS, ensure_services, redis_db, redis_url

Q = "mig_v5"
REDIS_DB = redis_db(10)  # only this module uses it; flushed before and after


@pytest.fixture
def url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    ensure_services(hbase=False)
    url = redis_url(REDIS_PORTS[0], REDIS_DB)
    r = redis.Redis.from_url(url)
    r.flushdb()
    monkeypatch.setenv("PINLATER_SHARDS", f"s1={url}")
    monkeypatch.setenv("PINLATER_CONTROL_URL", url)
    monkeypatch.setattr(upgrade, "BATCH", 3)  # many windows per lane
    yield url
    r.flushdb()
    r.close()


def settings(url: str) -> Settings:
    return Settings(shards=parse_shards(f"s1={url}"), control_url=url)


def snapshot(r: redis.Redis[bytes]) -> dict[bytes, object]:
    """Every key of the shard and what it holds."""
    read = {
        b"zset": lambda k: r.zrange(k, 0, -1, withscores=True), b"list": lambda k: r.lrange(k, 0, -1),
        b"set": r.smembers, b"hash": r.hgetall, b"string": r.get,
    }
    return {k: read[r.execute_command("TYPE", k)](k) for k in sorted(r.keys("pl:*"))}


def to_layout_5(r: redis.Redis[bytes]) -> None:
    """What layout-5 code kept for the same jobs: lane ''s copy of every
    pending job without a key, and no keyed index."""
    for priority in (1, 2):
        base = f"pl:{Q}:p{priority}:"
        if not r.exists(base + "turns", base + "waits"):
            continue
        keyed = {entry[16:] for entry in r.zrange(base + "keyed", 0, -1)}
        pending = r.zrange(base + "pending", 0, -1, withscores=True)
        plain: dict[str | bytes, float] = {m: s for m, s in pending if m not in keyed}
        r.delete(base + "keyed")
        if plain:
            r.zadd(base + "lane:", plain)
    r.set("pl:layout", 5)


def test_migrate_indexes_the_keyed_jobs_of_every_priority_that_keeps_lanes(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with JobService.from_settings(settings(url), source="old-worker") as service:
        service.create_queue(Q, priorities=2)
        far = int(time.time() * 1000) + 3_600_000
        for priority in (1, 2):
            service.enqueue(Q, [Job(b"plain", priority=priority) for _ in range(5)])
            service.enqueue(Q, [Job(b"k", priority=priority, key=k) for k in "ABCAB"])
            service.enqueue(Q, [Job(b"later", priority=priority, key="W", run_after_ms=far)])  # in waits
            service.enqueue(Q, [Job(b"plain", priority=priority) for _ in range(3)])
        taken = service.dequeue(Q, 3)  # the turns move on
        assert not service.ack(Q, succeeded=[Ack(j.descriptor, claim=j.claim) for j in taken]).stale
    r = redis.Redis.from_url(url)
    try:
        after = snapshot(r)
        assert r.zcard(f"pl:{Q}:p2:keyed") == 6 and not r.exists(f"pl:{Q}:p2:lane:")
        to_layout_5(r)
        assert r.zcard(f"pl:{Q}:p2:lane:") == 8 and not r.exists(f"pl:{Q}:p2:keyed")

        needs = rf"has storage layout 5, this PinLater needs {REDIS_SHARD.current}: run `pinlater migrate`"
        with JobService.from_settings(settings(url), source="new-worker") as service, pytest.raises(
            LayoutError, match=needs
        ):
            service.dequeue(Q, 1)

        assert main(["migrate"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert f"shard s1 (redis): step 5 -> 6: {REDIS_SHARD.steps[5].description}" in out
        assert snapshot(r) == after

        # Idempotent: the step again changes nothing.
        index_keyed_jobs(r)
        assert snapshot(r) == after
    finally:
        r.close()

    with JobService.from_settings(settings(url), source="new-worker") as service:
        got = service.dequeue(Q, 100)
        assert sorted(j.body for j in got) == [b"k"] * 8 + [b"plain"] * 15  # 3 of 28 taken, 2 later
        assert service.count(Q, JobState.PENDING, future=True) == 2


def make_batches(service: JobService) -> dict[str, str]:
    """Batches in every state: batch id -> its state."""
    for queue in (Q, Q + "_run", Q + "_done"):
        service.create_queue(queue)
    made: dict[str, str] = {}
    for i in range(8):
        batch = service.create_batch(Q + "_done", Job(b"cb%d" % i))
        run = i % 4 == 1  # its job runs, alone in its queue
        service.enqueue(Q + "_run" if run else Q, [Job(b"x")], batch=batch)
        if i % 4 == 0:
            service.cancel_batch(batch)
        elif run:
            [job] = service.dequeue(Q + "_run", 1)
            service.ack(Q + "_run", succeeded=[Ack(job.descriptor, claim=job.claim)])
            service.seal_batch(batch)
        elif i % 4 == 2:
            service.seal_batch(batch)
        made[batch] = service.batch_status(batch).state
    return made


def test_migrate_indexes_the_batches_that_ended_and_only_then_drops_them_when_old(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with JobService.from_settings(settings(url), source="old-worker") as service:
        made = make_batches(service)
    assert sorted(made.values()) == ["cancelled"] * 2 + ["open"] * 2 + ["released"] * 2 + ["sealed"] * 2
    ended = {b for b, state in made.items() if state in ("released", "cancelled")}
    r = redis.Redis.from_url(url)
    try:
        index = r.zrange("plc:batches:done", 0, -1, withscores=True)
        assert {m.decode() for m, _ in index} == ended
        r.delete("plc:batches:done")
        r.set("plc:layout", 2)

        # Layout 2 is used as it is: nothing that ended before is dropped yet.
        with JobService.from_settings(settings(url), source="new-worker") as service:
            assert service.operators.drop_old_batches(older_than_ms=0) == 0
            assert {b for b in made if service.batch_status(b)} == set(made)

        assert main(["migrate"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert f"control store (redis): step 2 -> 3: {REDIS_CONTROL.steps[2].description}" in out
        assert r.zrange("plc:batches:done", 0, -1, withscores=True) == index
        assert int(r.get("plc:layout") or 0) == REDIS_CONTROL.current == 3
        index_done_batches(r)  # idempotent
        assert r.zrange("plc:batches:done", 0, -1, withscores=True) == index
    finally:
        r.close()

    with JobService.from_settings(settings(url), source="new-worker") as service:
        assert service.operators.drop_old_batches(older_than_ms=0) == len(ended)
        live = {b.batch for b in service.operators.recent_batches(limit=100)}
        assert live == set(made) - ended
