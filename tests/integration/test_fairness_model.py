"""Fair service against random schedules: the same random actions on a
store kind and on the memory shard, whose lanes are a plain-Python
statement of the same rules, must claim the same jobs in the same order
after every action; and at the end every job still PENDING is claimed by
draining (no job is stranded outside the lanes). Actions: enqueues with
and without keys, due now, long due or not due for an hour, on two
priorities; dequeues, and dequeues with per-key allowances (a key with
none left, without one, or with a few); ACKs; failures; moves back to
PENDING; claims expired; failed jobs retried; pending jobs deleted.

Times: each action waits 2 ms first, so that every action's clock reading
is later than the one before on both clocks (orders by run_after then
agree); a job is due now, was due long ago, is due 1 ms after an action
(so at the next), or is due in an hour."""

from __future__ import annotations

import functools
import random
import time

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.descriptor import JobDescriptor, descriptor_prefix
from pinlater.models import DequeuedJob
from pinlater.stores.base import ExpiredClaims, ShardBackend
from pinlater.stores.mysql import lanes
from pinlater.stores.redis import loader
from tests.support.stores import settings_for

STEPS = 250
HOUR_MS = 3_600_000
KEYS = ["", "", "a", "b", "c", "é"]


class Pair:
    """One queue on the store under test and on a memory shard."""

    def __init__(self, setup: str, queue: str) -> None:
        self.tested = JobService.from_settings(settings_for(setup), source="model")
        self.memory = JobService.from_settings(settings_for("memory"), source="model")
        self.queue = queue
        for s in self.both:
            s.create_queue(queue, priorities=2)
        # A job's descriptor on the store under test -> on the memory shard
        # (local ids differ: a MySQL shard counts them per table).
        self.same: dict[str, str] = {}
        # memory's descriptor -> (tested's running job, memory's)
        self.running: dict[str, tuple[DequeuedJob, DequeuedJob]] = {}

    @property
    def both(self) -> tuple[JobService, JobService]:
        return self.tested, self.memory

    def close(self) -> None:
        for s in self.both:
            s.close()

    def each(self, act: object) -> list[object]:
        return [act(s) for s in self.both]  # type: ignore[operator]

    def dequeue(self, n: int) -> None:
        a, b = self.each(lambda s: s.dequeue(self.queue, n))
        assert [self.same[x.descriptor] for x in a] == [y.descriptor for y in b]  # type: ignore[attr-defined]
        for x, y in zip(a, b, strict=True):  # type: ignore[call-overload]
            self.running[y.descriptor] = (x, y)

    def dequeue_allowed(self, n: int, allow: dict[str, int]) -> None:
        """A shard's dequeue with allowances, on both: the same jobs of the
        same keys in the same order, and the allowances counted down alike."""
        got, lefts = [], []
        for s in self.both:
            be = s.core.shards.all()[0]
            left = dict(allow)
            claims = be.dequeue(self.queue, [1, 2], n, "model", allow=left).jobs
            prefix = descriptor_prefix(self.queue, be.shard_id)
            got.append([(DequeuedJob(f"{prefix}{c.priority}:{c.local_id}", c.body, c.attempts_allowed,
                                     c.attempts_remaining, c.claim), c.key) for c in claims])
            lefts.append(left)
        a, b = got
        assert [(self.same[x.descriptor], k) for x, k in a] == [(y.descriptor, k) for y, k in b]
        assert lefts[0] == lefts[1]
        for (x, _), (y, _) in zip(a, b, strict=True):
            self.running[y.descriptor] = (x, y)

    def priority_of(self, memory_descriptor: str) -> int:
        return JobDescriptor.parse(memory_descriptor).priority

    def settle(self, rng: random.Random, how: str) -> None:
        if not self.running:
            return
        at = rng.choice(sorted(self.running))
        pair = self.running.pop(at)
        for s, j in zip(self.both, pair, strict=True):
            if how == "ack":
                s.ack(self.queue, succeeded=[Ack(j.descriptor, claim=j.claim)])
            elif how in ("fail", "fail later"):
                delay = 1 if how == "fail" else HOUR_MS  # due at the next action, or not in this test
                s.ack(self.queue, failed=[Ack(j.descriptor, claim=j.claim, retry_delay_ms=delay)])
            else:
                later = None if how == "back" else s.core.shards.all()[0].now_ms() + HOUR_MS
                s.checkpoint(self.queue, [Checkpoint(j.descriptor, claim=j.claim, move_to_pending=True,
                                                     run_after_ms=later)])

    def shard_call(self, fn: object) -> list[object]:
        return [fn(s.core.shards.all()[0]) for s in self.both]  # type: ignore[operator]


def _enqueue(pair: Pair, rng: random.Random) -> None:
    priority = rng.choice([1, 1, 2])
    # (key, when: "now", "long ago" or "later", attempts)
    jobs = [(rng.choice(KEYS), rng.choices(["now", "long ago", "later"], [7, 1, 2])[0], rng.randint(1, 3))
            for _ in range(rng.randint(1, 6))]
    made = []
    for s in pair.both:
        at = {"now": None, "long ago": 1, "later": s.core.shards.all()[0].now_ms() + HOUR_MS}
        made.append(s.enqueue(pair.queue, [Job(b"j", priority=priority, key=key, attempts_allowed=attempts,
                                               run_after_ms=at[when]) for key, when, attempts in jobs]))
    pair.same.update(zip(*made, strict=True))


def _expire(be: ShardBackend, queue: str, priority: int) -> ExpiredClaims:
    return be.expire_claims(queue, priority, 0, 1000)


def _delete(be: ShardBackend, queue: str, priority: int, doomed: list[int]) -> int:
    return be.delete(queue, priority, JobState.PENDING, doomed, 1000)


def _cancel(pair: Pair, rng: random.Random) -> None:
    """A cancel of a few jobs, pending, running or ended, on both: the same
    outcome for each; the running ones it ends leave the model's runs."""
    chosen = rng.sample(sorted(pair.same.values()), min(len(pair.same), rng.randint(1, 4)))
    back = {m: t for t, m in pair.same.items()}
    tested, memory = pair.tested.cancel(pair.queue, [back[m] for m in chosen]), pair.memory.cancel(pair.queue, chosen)
    for field in ("cancelled", "interrupted", "finished", "unknown"):
        assert sorted(pair.same[d] for d in getattr(tested, field)) == sorted(getattr(memory, field)), field
    for m in memory.interrupted:
        pair.running.pop(m, None)


@pytest.mark.parametrize("setup", ["redis", "redis, small bounds", "mysql", "mysql, small bounds"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_store_serves_keys_in_the_same_turns_as_the_memory_shard(
    setup: str, seed: int, servers: None, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What bounds one call's work must not change the turns: a dequeue that
    # stops at 2 lanes without a job and goes on in another call (both
    # stores), MySQL admitting a backlog of newcomers 2 a transaction, the
    # first that came first, and Redis's lane '' looking at one job, then
    # finding the first without a key by a binary search over counts.
    if setup == "mysql, small bounds":
        monkeypatch.setattr(lanes, "ADMIT", 2)
        monkeypatch.setattr(lanes, "LANE_WASTE", 2)
        setup = "mysql"
    elif setup == "redis, small bounds":
        source = loader.lua_source
        small = {"_prelude": ("local PLAIN_WINDOW = 16\n", "local PLAIN_WINDOW = 1\n"),
                 "dequeue": ("local LANE_WASTE = 1000\n", "local LANE_WASTE = 2\n")}
        for name, (big, _) in small.items():
            assert big in source("pinlater.stores.redis", name), f"{name}.lua changed: update this test"

        def small_bounds(package: str, name: str) -> str:
            text = source(package, name)
            return text.replace(*small[name]) if name in small else text

        monkeypatch.setattr(loader, "lua_source", small_bounds)
        setup = "redis"
    rng = random.Random(seed)
    pair = Pair(setup, queue_name)
    try:
        for _ in range(STEPS):
            time.sleep(0.002)
            roll = rng.random()
            if roll < 0.30:
                _enqueue(pair, rng)
            elif roll < 0.45:
                pair.dequeue(rng.randint(1, 5))
            elif roll < 0.60:
                allow = {}
                for key in KEYS[2:]:
                    r = rng.random()
                    if r > 0.25:
                        allow[key] = 0 if r < 0.45 else rng.randint(1, 3)
                pair.dequeue_allowed(rng.randint(1, 5), allow)
            elif roll < 0.70:
                pair.settle(rng, "ack")
            elif roll < 0.78:
                pair.settle(rng, rng.choice(["fail", "fail later"]))
            elif roll < 0.86:
                pair.settle(rng, rng.choice(["back", "back later"]))
            elif roll < 0.90:
                priority = rng.choice([1, 2])
                a, b = pair.shard_call(functools.partial(_expire, queue=pair.queue, priority=priority))
                assert a == b
                pair.running = {k: v for k, v in pair.running.items() if pair.priority_of(k) != priority}
            elif roll < 0.95:
                retry = functools.partial(JobService.retry_failed, queue=pair.queue,
                                          priority=rng.choice([1, 2]), attempts=2)
                a, b = pair.each(retry)
                assert a == b
            elif roll < 0.97:
                _cancel(pair, rng)
            else:
                priority = rng.choice([1, 2])
                pending = sorted(j.descriptor for j in pair.memory.scan(pair.queue, JobState.PENDING,
                                                                         priority=priority, limit=1000).jobs)
                doomed = rng.sample(pending, min(len(pending), rng.randint(0, 3)))
                back = {m: t for t, m in pair.same.items()}
                ids = [[JobDescriptor.parse(d).local_id for d in ds] for ds in ([back[m] for m in doomed], doomed)]
                a, b = (_delete(s.core.shards.all()[0], pair.queue, priority, i)
                        for s, i in zip(pair.both, ids, strict=True))
                assert a == b
        # Drain: every job that is due is claimed, in the same order on both.
        for _ in range(200):
            before = len(pair.running)
            pair.dequeue(7)
            if len(pair.running) == before:
                break
        for s in pair.both:
            assert s.count(pair.queue, JobState.PENDING, priority=1) == 0
            assert s.count(pair.queue, JobState.PENDING, priority=2) == 0
        counts = pair.each(lambda s: [s.count(pair.queue, st, priority=p, future=f)
                                      for st in JobState for p in (1, 2) for f in (False, True)])
        assert counts[0] == counts[1]
    finally:
        pair.close()
