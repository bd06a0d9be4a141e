"""A small tenant behind a big one: key A's backlog is enqueued first, then
key B's 20 jobs; one worker takes jobs one at a time. Every B job starts
before A's 100th, and how many jobs B waits behind does not grow with A's
backlog (2,000 or 20,000 jobs). On one shard and on two, Redis and MySQL.
The same without keys, on one shard, is what the keys fix: B then waits
for all of A. And what one call does is bounded however big the backlog:
MySQL's admission of keyed jobs into their lanes, a transaction at a time
with the turns of all at once; Redis turning lanes on with many jobs
pending (no copy of them); and the empty lanes a dequeue meets, in Redis
scripts and MySQL transactions. A dequeue that goes on in another call
keeps what the first claimed should the shard fail in between."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from pinlater import Ack, Job, JobService, JobState
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import ShardUnavailable
from pinlater.stores.mysql import lanes
from pinlater.stores.mysql.statements import sql
from pinlater.stores.redis.shard import ArgT, RedisBackend
from tests.support.stores import settings_for

SMALL = 20


def _b_positions(service: JobService, backlog: int, keyed: bool) -> list[int]:
    """Where B's jobs start among the jobs one worker takes (0 first)."""
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    service.create_queue(queue)
    try:
        for start in range(0, backlog, 1000):
            n = min(1000, backlog - start)
            service.enqueue(queue, [Job(b"a", key="A" if keyed else "") for _ in range(n)])
        small = set(service.enqueue(queue, [Job(b"b", key="B" if keyed else "") for _ in range(SMALL)]))
        positions: list[int] = []
        taken = 0
        while len(positions) < SMALL and taken < backlog + SMALL:
            [job] = service.dequeue(queue, 1)
            service.ack(queue, succeeded=[Ack(job.descriptor, claim=job.claim)])
            if job.descriptor in small:
                positions.append(taken)
            taken += 1
        return positions
    finally:
        while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
            pass


@pytest.mark.parametrize("setup", ["redis", "redis_sharded", "mysql", "mysql_sharded"])
def test_a_small_tenants_jobs_start_among_a_big_backlogs_first(setup: str, servers: None) -> None:
    with JobService.from_settings(settings_for(setup), source="fair-worker") as service:
        waits = {backlog: _b_positions(service, backlog, keyed=True) for backlog in (2_000, 20_000)}
        plain = _b_positions(service, 2_000, keyed=False) if not setup.endswith("sharded") else []
    for backlog, positions in waits.items():
        a_before_last_b = positions[-1] - (SMALL - 1)
        print(f"\n{setup}: backlog {backlog:,}: B's last job started after {a_before_last_b} of A's")
        assert len(positions) == SMALL
        assert a_before_last_b < 100
    # B's wait does not grow with A's backlog: one shard alternates A, B, A, B, ...
    if not setup.endswith("sharded"):
        assert waits[2_000] == waits[20_000] == list(range(1, 2 * SMALL, 2))
    # Without keys B waits behind all of A (one shard: on two, that depends on
    # where the batches went).
    if not setup.endswith("sharded"):
        assert plain[0] == 2_000


def test_a_backlog_of_newcomers_is_admitted_a_bounded_number_a_transaction(
    servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL admits keyed jobs into their lanes at the next dequeue: a backlog
    of them goes ADMIT a transaction (so that no statement's time grows with
    it), at most ADMIT_ROUNDS transactions before the dequeue serves, and
    the turns are those of all at once."""
    monkeypatch.setattr(lanes, "ADMIT", 10)
    monkeypatch.setattr(lanes, "ADMIT_ROUNDS", 3)
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    with JobService.from_settings(settings_for("mysql"), source="fair-admit") as service:
        service.create_queue(queue)
        enqueued = service.enqueue(queue, [Job(b"x", key=f"k{i % 5}") for i in range(100)])
        shard = service.core.shards.all()[0]
        count = f"SELECT COUNT(*) FROM `{job_table(queue, 1)}` WHERE state = 5"

        def newcomers() -> int:
            return int(shard._run(queue, (1,), lambda s: s.scalar(count)))  # type: ignore[attr-defined]

        assert newcomers() == 100
        taken = [job.descriptor for job in service.dequeue(queue, 1)]
        assert newcomers() == 100 - 3 * 10  # three transactions of ten; the third served
        while len(taken) < 100 and (got := service.dequeue(queue, 7)):
            taken += [job.descriptor for job in got]
        assert newcomers() == 0
        # Job i has key k(i mod 5): the keys' turns go k0, k1, ..., k4, k0, ...
        # as they came, which is the order they were enqueued in.
        assert taken == enqueued
        service.ack(queue, succeeded=[Ack(d) for d in taken])


def test_lanes_on_redis_cost_the_same_however_many_jobs_are_pending(servers: None) -> None:
    """The first keyed job of a priority turns its lanes on without a copy
    of the jobs already pending (lane '' is the pending zset without the
    keyed index), and lane '' finds its first job behind a long run of keyed
    ones by counting: every key of the priority but the pending zset and the
    jobs hash stays as small as the keyed jobs make it."""
    settings = settings_for("redis")
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    raw = redis.Redis.from_url(settings.shards[0].url)
    with JobService.from_settings(settings, source="fair-worker") as service:
        service.create_queue(queue)
        try:
            for _ in range(20):
                service.enqueue(queue, [Job(b"plain") for _ in range(1000)])
            [keyed] = service.enqueue(queue, [Job(b"keyed", key="A")])
            sizes = {}
            for name in raw.scan_iter(match=f"pl:{queue}:p[0-9]*:*", count=1000):
                kind = raw.execute_command("TYPE", name)
                size = {b"zset": raw.zcard, b"list": raw.llen, b"set": raw.scard, b"hash": raw.hlen}[kind](name)
                sizes[name.decode().rsplit(":", 1)[-1] or "lane:"] = size
            assert sizes.pop("pending") == sizes.pop("jobs") == 20_001
            assert sizes == {"turns": 2, "inturn": 1, "A": 1, "keyed": 1}  # turns: lane '', then A
            # Lane '' first, then A; then 1,500 keyed jobs ahead of every
            # plain one, and lane '' still finds the first plain job.
            first, second = service.dequeue(queue, 2)
            assert (first.body, second.descriptor) == (b"plain", keyed)
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass
            for _ in range(3):
                service.enqueue(queue, [Job(b"a", key="A", run_after_ms=1) for _ in range(500)])
            late = service.enqueue(queue, [Job(b"late plain", run_after_ms=2)])
            got = service.dequeue(queue, 3)
            assert [j.body for j in got] == [b"late plain", b"a", b"a"]  # lane '' is first in turn again
            assert got[0].descriptor == late[0]
        finally:
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass
            raw.close()


def _before_each_dequeue_call(setup: str, monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None]) -> None:
    """``hook()`` before each call a dequeue makes to its shard: a Redis
    script, a MySQL transaction's serving of the lanes."""
    if setup == "redis":
        run = RedisBackend._run

        def hooked(self: RedisBackend, name: str, keys_: Sequence[str], args: Sequence[ArgT]) -> Any:
            if name == "dequeue":
                hook()
            return run(self, name, keys_, args)

        monkeypatch.setattr(RedisBackend, "_run", hooked)
    else:
        serve = lanes._serve

        def hooked_serve(*args: Any, **kwargs: Any) -> Any:
            hook()
            return serve(*args, **kwargs)

        monkeypatch.setattr(lanes, "_serve", hooked_serve)


def test_a_page_of_lanes_is_read_in_turn_order_each_head_by_its_lanes_key(servers: None) -> None:
    """What the plan of a dequeue's page of lanes must be, whatever the
    statistics say: the page read from the turn index in order (no sort of
    every lane of the table) and each lane's first job found by its lane's
    prefix of the primary key (not by reading all of the table's entries)."""
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    with JobService.from_settings(settings_for("mysql"), source="fair-plan") as service:
        service.create_queue(queue)
        try:
            for start in range(0, 3000, 1000):
                service.enqueue(queue, [Job(b"x", key=f"k{start + i}") for i in range(1000)])
            service.dequeue(queue, 1)  # admitted into 3,000 lanes
            shard = service.core.shards.all()[0]
            stmt = "EXPLAIN " + sql("lanes_in_turn")
            args = {"jobs": job_table(queue, 1), "after": -1, "page_limit": 101}

            def explain(s: Any) -> list[tuple[Any, ...]]:
                s.execute(stmt, args)
                return list(s.fetchall())

            plan = {row[2]: row for row in shard._run(queue, (1,), explain)}  # type: ignore[attr-defined]
            assert set(plan) == {"l", "j"}, plan
            assert plan["l"][5] == "by_turn" and "filesort" not in (plan["l"][9] or ""), plan["l"]
            assert plan["j"][5] == "PRIMARY" and plan["j"][7] is not None and "const" in plan["j"][7], plan["j"]
        finally:
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass


@pytest.mark.parametrize("setup", ["redis", "mysql"])
def test_a_dequeue_meets_a_bounded_number_of_empty_lanes_a_call(
    setup: str, servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lanes whose jobs were deleted stay in turn until a dequeue meets
    them. One script call (Redis) or transaction (MySQL) meets at most
    1,000 lanes without a job, then the dequeue makes another: 5,000 empty
    lanes before the one with a job take six, and the job still comes out
    of one dequeue."""
    calls: list[str] = []
    _before_each_dequeue_call(setup, monkeypatch, lambda: calls.append("dequeue"))
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    with JobService.from_settings(settings_for(setup), source="fair-worker") as service:
        service.create_queue(queue)
        try:
            for start in range(0, 5000, 1000):
                service.enqueue(queue, [Job(b"gone", key=f"k{start + i}") for i in range(1000)])
            # (MySQL admits them into their lanes at a dequeue.)
            [first] = service.dequeue(queue, 1)
            assert not service.ack(queue, succeeded=[Ack(first.descriptor, claim=first.claim)]).stale
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass
            [late] = service.enqueue(queue, [Job(b"late", key="late")])
            calls.clear()
            [job] = service.dequeue(queue, 1)
            assert job.descriptor == late
            assert calls.count("dequeue") == 6
        finally:
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass


@pytest.mark.parametrize("setup", ["redis", "mysql"])
def test_what_a_dequeue_claimed_before_its_shard_failed_comes_back_with_it(
    setup: str, servers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dequeue that goes on in another call (past 1,000 empty lanes) and
    meets a failing shard there hands out what the first call claimed:
    nobody would hold it till its claim timed out, spending an attempt."""
    calls: list[str] = []

    def failing_second() -> None:
        calls.append("dequeue")
        if len(calls) == 2:
            raise ShardUnavailable("shard gone between two calls of one dequeue")

    _before_each_dequeue_call(setup, monkeypatch, failing_second)
    queue = f"fair_{uuid.uuid4().hex[:10]}"
    with JobService.from_settings(settings_for(setup), source="fair-worker") as service:
        service.create_queue(queue)
        try:
            for start in (0, 750):
                service.enqueue(queue, [Job(b"gone", key=f"g{i}") for i in range(start, start + 750)])
            [first] = service.dequeue(queue, 1)  # g0's (MySQL admits them all into their lanes)
            assert not service.ack(queue, succeeded=[Ack(first.descriptor, claim=first.claim)]).stale
            [kept] = service.enqueue(queue, [Job(b"kept", key="g1")])  # g1 keeps its turn, in front
            assert service.delete_jobs(queue, JobState.PENDING, body_regex="^gone$", limit=10_000) == 1499
            service.enqueue(queue, [Job(b"late", key="late")])
            calls.clear()
            got = service.dequeue(queue, 2)  # kept, 1,000 empty lanes; then the next call fails
            assert calls == ["dequeue", "dequeue"]
            assert [j.descriptor for j in got] == [kept]
            service.operators.shard_status(probe=True)  # back in rotation
            assert service.count(queue, JobState.RUNNING) == 1
            assert not service.ack(queue, succeeded=[Ack(kept, claim=got[0].claim)]).stale
        finally:
            while service.delete_jobs(queue, JobState.PENDING, limit=10_000):
                pass
