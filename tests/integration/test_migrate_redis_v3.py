"""``pinlater migrate`` from Redis shard layout 2 (a hash per job, members
zero-padded to 20 digits) to layout 3 (one field per job in a per-priority
jobs hash) on a real Redis, through the CLI: every job in every state comes
through with every field, a RUNNING job's live claim still ACKs, nothing is
left in the old layout, and the step is idempotent and resumable.

The layout-2 keys are written here with literal names (frozen: do not
change them when the layout changes again)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import redis

import pinlater.stores.redis.upgrade as upgrade
from pinlater.cli import main
from pinlater.models import Ack, JobInfo
from pinlater.queue_config import QueueConfig
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.states import JobState
from pinlater.stores.layout import LayoutError
from pinlater.stores.redis.layout import REDIS_SHARD
from pinlater.stores.redis.scripts import job_script_source
from pinlater.stores.redis.upgrade import upgrade_to_v3
from tests.servers import REDIS_PORTS, ensure_services, redis_db, redis_url

P, R, S, F = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED
Q = "mig_v2"
CLAIM = "0123456789abcdef@old-worker"
REDIS_DB = redis_db(12)  # only this module uses it; flushed before and after
SUFFIX = {P: "pending", R: "running", S: "succeeded", F: "failed"}
HOUR = 3_600_000


@dataclass(frozen=True)
class V2Job:
    local_id: int
    priority: int
    state: JobState
    body: bytes
    allowed: int = 3
    remaining: int = 3
    status: str = ""
    run_after_ms: int = 0  # 0: the base time
    claim: str = ""


def v2_jobs() -> list[V2Job]:
    jobs = [
        V2Job(1, 1, R, b"running job", remaining=2, claim=CLAIM),
        V2Job(2, 1, F, b"failed job", allowed=2, remaining=0, status="boom; boom"),
        V2Job(3, 1, S, b"done job", status="done \u2713"),
        V2Job(4, 1, P, b"future job", status="queued by backfill", run_after_ms=HOUR),
        V2Job(5, 2, P, bytes(range(256)) * 5, allowed=65_535, remaining=7),
    ]
    # Enough due jobs with equal run_after for several conversion windows.
    jobs += [V2Job(i, 1, P, f"due {i}".encode() * 30) for i in range(6, 31)]
    return jobs


def write_v2_redis(url: str, base_ms: int) -> None:
    """Keys exactly as layout 2 wrote them."""
    r = redis.Redis.from_url(url)
    jobs = v2_jobs()
    r.sadd("pl:queues", Q)
    r.set(f"pl:{Q}:ids", max(j.local_id for j in jobs))
    r.sadd(f"pl:{Q}:prios", 1, 2)
    for j in jobs:
        run_after = base_ms + j.run_after_ms
        updated = base_ms + 500 if j.state is not P else base_ms
        r.hset(f"pl:{Q}:p{j.priority}:j:{j.local_id}", mapping={
            "body": j.body, "state": int(j.state), "attempts_allowed": j.allowed,
            "attempts_remaining": j.remaining, "custom_status": j.status, "created_at": base_ms,
            "run_after": run_after, "updated_at": updated, "claim": j.claim,
        })
        score = run_after if j.state is P else updated
        r.zadd(f"pl:{Q}:p{j.priority}:{SUFFIX[j.state]}", {f"{j.local_id:020d}": score})
    r.set("pl:layout", 2)
    r.hset("plc:queues", Q, QueueConfig(Q, priorities=2).to_json())
    r.set("plc:layout", 2)
    r.close()


def descriptor(job: V2Job) -> str:
    return f"{Q}:ss1:p{job.priority}:{job.local_id}"


@pytest.fixture
def url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    ensure_services(hbase=False)
    url = redis_url(REDIS_PORTS[0], REDIS_DB)
    r = redis.Redis.from_url(url)
    r.flushdb()
    request.addfinalizer(r.close)
    request.addfinalizer(r.flushdb)
    monkeypatch.setenv("PINLATER_SHARDS", f"s1={url}")
    monkeypatch.setenv("PINLATER_CONTROL_URL", url)
    monkeypatch.setattr(upgrade, "BATCH", 4)  # many windows, some across equal scores
    return url


def settings(url: str) -> Settings:
    return Settings(shards=parse_shards(f"s1={url}"), control_url=url)


def old_keys(url: str) -> list[bytes]:
    r = redis.Redis.from_url(url)
    try:
        return sorted(r.keys(f"pl:{Q}:p*:j:*"))
    finally:
        r.close()


def assert_every_job_kept(service: JobService, base_ms: int) -> None:
    jobs = v2_jobs()
    infos = service.lookup([descriptor(j) for j in jobs], include_body=True)
    assert len(infos) == len(jobs)
    for j in jobs:
        info: JobInfo = infos[descriptor(j)]
        updated = base_ms + 500 if j.state is not P else base_ms
        assert (info.state, info.attempts_allowed, info.attempts_remaining) == (j.state, j.allowed, j.remaining)
        assert (info.custom_status, info.body) == (j.status, j.body)
        assert (info.created_at_ms, info.run_after_ms, info.updated_at_ms) == (
            base_ms, base_ms + j.run_after_ms, updated
        )
        assert info.claim == (j.claim.split("@", 1)[1] if j.claim else None)  # lookups show the holder


def test_migrate_converts_a_layout_2_shard_without_losing_a_job(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base_ms = int(time.time() * 1000) - 60_000
    write_v2_redis(url, base_ms)
    jobs = v2_jobs()

    # This code refuses the old layout until migrate has run.
    needs = rf"has storage layout 2, this PinLater needs {REDIS_SHARD.current}: run `pinlater migrate`"
    with JobService.from_settings(settings(url), source="old-worker") as service, pytest.raises(
        LayoutError, match=needs
    ):
        service.lookup([descriptor(jobs[0])])

    # A first run that stops part-way (a crash): one window of the pending zset.
    r = redis.Redis.from_url(url)
    script = r.register_script(job_script_source("upgrade_v3"))
    assert script(keys=[f"pl:{Q}:p1:pending", f"pl:{Q}:p1:jobs", f"pl:{Q}:p1:j:"], args=[0, 4], client=r) == [4, 4, 0]
    r.close()
    assert len(old_keys(url)) == len(jobs) - 4

    assert main(["migrate"]) == 0
    out = capsys.readouterr().out.splitlines()
    current = REDIS_SHARD.current
    assert out[: current] == [
        f"shard s1 (redis): layout 2, current {current}",
        *(f"shard s1 (redis): step {v} -> {v + 1}: {REDIS_SHARD.steps[v].description}" for v in range(2, current)),
        f"shard s1 (redis): now at layout {current}",
    ]
    assert old_keys(url) == []

    with JobService.from_settings(settings(url), source="old-worker") as service:
        assert_every_job_kept(service, base_ms)
        assert [service.count(Q, state) for state in (P, R, S, F)] == [26, 1, 1, 1]  # P: the due ones
        assert service.count(Q, P, future=True) == 1
        # The claim taken before the upgrade still holds.
        result = service.ack(Q, succeeded=[Ack(descriptor(jobs[0]), append_custom_status="after", claim=CLAIM)])
        assert not result.stale
        assert service.lookup([descriptor(jobs[0])])[descriptor(jobs[0])].custom_status == "after"
        # Due jobs come out by priority, then (run_after, id); the future one stays.
        got = service.dequeue(Q, 100)
        assert [g.descriptor for g in got] == [descriptor(j) for j in jobs[5:]] + [descriptor(jobs[4])]
        assert got[-1].body == jobs[4].body and got[-1].attempts_remaining == 7
        assert not service.ack(Q, succeeded=[Ack(g.descriptor) for g in got]).stale
        assert service.retry_failed(Q, attempts=2) == 1
        assert [service.count(Q, state) for state in (P, R, S, F)] == [1, 0, 28, 0]
        assert service.count(Q, P, future=True) == 1

    # Idempotent: the step again (a re-run after a crash before the version
    # was recorded) changes nothing.
    r = redis.Redis.from_url(url)
    before = {k: r.dump(k) for k in r.keys("pl:*")}
    upgrade_to_v3(r)
    assert {k: r.dump(k) for k in r.keys("pl:*")} == before
    r.close()
    assert main(["migrate"]) == 0
    assert f"shard s1 (redis): layout {REDIS_SHARD.current}, up to date" in capsys.readouterr().out


def test_a_member_without_its_job_is_dropped_not_invented(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    base_ms = int(time.time() * 1000) - 60_000
    write_v2_redis(url, base_ms)
    r = redis.Redis.from_url(url)
    r.delete(f"pl:{Q}:p1:j:7", f"pl:{Q}:p1:j:9")  # two holes inside the pending windows
    r.close()
    assert main(["migrate"]) == 0
    capsys.readouterr()
    with JobService.from_settings(settings(url), source="w") as service:
        assert service.count(Q, P) == 25 - 2 + 1  # the due ones but the holes, and job 5 of priority 2
        got = {g.descriptor for g in service.dequeue(Q, 100)}
        assert got == {descriptor(j) for j in v2_jobs()[4:] if j.local_id not in (7, 9)}
