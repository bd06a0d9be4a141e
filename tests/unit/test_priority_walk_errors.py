"""Every kind of store error on one shard of two, over memory shards: a
dequeue (and a dry run) hands over what it claimed on the other shard and
gives back exactly the rate tokens it did not use, and ends at a shard
that went silent after the call was sent; an enqueue goes to the
other shard when nothing was written; an ACK reports the failing shard's
entries as unapplied; the health probe keeps a shard that refuses writes
out of rotation until it writes again. The same over real servers:
tests/integration/test_write_refusal.py."""

from __future__ import annotations

import contextlib
import logging
import pickle
import time
from collections.abc import Iterator, Sequence

import pytest

from pinlater import Ack, Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.engine import idempotency
from pinlater.engine.core import Core
from pinlater.engine.shards import REFUSES_WRITES, UNAVAILABLE, ShardSet
from pinlater.errors import (
    AckNotApplied,
    EnqueueOutcomeUnknown,
    EnqueueRejected,
    ErrorCode,
    NoHealthyShards,
    PinLaterError,
    StorageError,
)
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.stores.base import (
    AckItem,
    Claims,
    EnqueueItem,
    FailItem,
    ShardBackend,
    ShardBusy,
    ShardOutcomeUnknown,
    ShardUnavailable,
    ShardWriteRefused,
)
from pinlater.stores.memory.control import MemoryControlStore
from pinlater.stores.memory.shard import MemoryBackend
from pinlater.stores.mysql.errors import MySQLStorageError

Q = "q"
# Rate limits: 0.001 jobs/s with a bucket of 10 tokens, which refills by
# nothing within a test.
RATE, BURST_S, BURST = 0.001, 10_000.0, 10

# What a shard call may raise, as the shard set sees it.
ERRORS = {
    "unavailable": ShardUnavailable("memory shard m2 unavailable: reset"),
    "busy": ShardBusy("memory shard m2: every pooled connection is busy"),
    "write_refused": ShardWriteRefused("memory shard m2 refuses writes: READONLY"),
    "deadlock": MySQLStorageError("m2: MySQL error 1213: Deadlock found", 1213),
    "storage": StorageError("memory shard m2: ERR something broke"),
    "driver": RuntimeError("a driver's own error"),
}
# Errors after which a dequeue that claimed nothing raises (all but unavailable).
RAISED = sorted(set(ERRORS) - {"unavailable"})


class Failing(MemoryBackend):
    """A memory shard whose calls raise ``error`` while it is set (its
    ``ping`` still answers, as a read-only server's does)."""

    error: BaseException | None = None

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def probe(self) -> None:
        self._check()

    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        self._check()
        return super().enqueue(queue, items)

    def dequeue(
        self, queue: str, priorities: Sequence[int], limit: int, source: str, look_ahead: Sequence[int] = (),
        token: str | None = None, allow: dict[str, int] | None = None, counted: bool = False,
    ) -> Claims:
        self._check()
        return super().dequeue(queue, priorities, limit, source, look_ahead, token, allow, counted)

    def peek(self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()) -> Claims:
        self._check()
        return super().peek(queue, priorities, limit, look_ahead)

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        self._check()
        return super().ack_succeeded(queue, items)

    def ack_failed(self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()) -> list[bool]:
        self._check()
        return super().ack_failed(queue, items, delay_table)


class Cluster:
    """A service over a healthy memory shard ``m1`` and a ``Failing`` one
    ``m2``, visited in the order of ``order`` (no probing unless asked)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.good, self.bad = MemoryBackend("m1"), Failing("m2")
        self.shards = ShardSet([self.good, self.bad], probe_interval_s=3600)
        self.order = ["m1", "m2"]
        monkeypatch.setattr(self.shards, "healthy_shuffled", self._in_order)
        core = Core.build(self.shards, MemoryControlStore(), Settings(rate_burst_s=BURST_S))
        self.svc = JobService(core, source="w", owns_core=True)

    def _in_order(self) -> list[ShardBackend]:
        return sorted(self.shards.healthy(), key=lambda b: self.order.index(b.shard_id))

    def enqueue_on(self, shard: str, n: int) -> list[str]:
        """``n`` jobs, stored on ``shard`` (the first one tried)."""
        self.order = [shard, *(s for s in ("m1", "m2") if s != shard)]
        descriptors = self.svc.enqueue(Q, [Job(b"job %d" % i) for i in range(n)])
        assert {JobDescriptor.parse(d).shard for d in descriptors} == {shard}
        self.order = ["m1", "m2"]
        return descriptors

    def tokens_left(self) -> int:
        core = self.svc.core
        return core.rate_limiter.take(core.configs.get(Q), 1000)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    c = Cluster(monkeypatch)
    c.svc.create_queue(Q, priorities=1, max_dequeue_rate=RATE)
    yield c
    c.svc.close()


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_a_dequeue_hands_over_what_it_claimed_before_a_shard_failed(
    cluster: Cluster, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    on_good = cluster.enqueue_on("m1", 3)
    on_bad = cluster.enqueue_on("m2", 3)
    cluster.bad.error = ERRORS[kind]
    with caplog.at_level(logging.WARNING, logger="pinlater.engine.shards"):
        jobs = cluster.svc.dequeue(Q, 8)  # m1 first: its 3 jobs, then m2 fails
        with contextlib.suppress(PinLaterError):  # m1 is empty now; m2 fails again, unless out of rotation
            assert cluster.svc.dequeue(Q, 8) == []
    assert sorted(j.descriptor for j in jobs) == sorted(on_good)
    # Claimed under the claims handed over (a lookup shows whose; the ACK
    # below with each claim proves it), and the rate tokens not used given back.
    info = cluster.svc.lookup(on_good)
    assert {d: (i.state, i.claim) for d, i in info.items()} == {
        j.descriptor: (JobState.RUNNING, j.claim[17:]) for j in jobs}
    assert cluster.tokens_left() == BURST - 3
    # The failing shard is reported: its health, the store metrics, a warning at most once a second.
    health = cluster.shards.status()["m2"]
    assert health.last_error is not None and str(ERRORS[kind]) in health.last_error
    errors = cluster.svc.operators.store_metrics_snapshot()["m2"]["dequeue"]["errors"]
    assert set(errors) == {"StorageError" if kind == "driver" else type(ERRORS[kind]).__name__}
    skipped = [r for r in caplog.records if "went on without shard m2" in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in caplog.records]
    # The jobs are the caller's to finish; m2's wait there, untouched.
    assert cluster.svc.ack(Q, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs]).acked == [
        j.descriptor for j in jobs]
    cluster.bad.error = None
    assert {i.state for i in cluster.svc.lookup(on_bad).values()} == {JobState.PENDING}


@pytest.mark.parametrize("kind", RAISED)
def test_a_dequeue_that_claims_nothing_raises_the_shards_error(cluster: Cluster, kind: str) -> None:
    cluster.enqueue_on("m2", 2)
    cluster.bad.error = ERRORS[kind]
    with pytest.raises(StorageError) as raised:
        cluster.svc.dequeue(Q, 5)
    assert str(ERRORS[kind]) in str(raised.value)
    assert cluster.tokens_left() == BURST  # every token given back


def test_a_dequeue_that_claims_nothing_beside_an_unavailable_shard_is_empty(cluster: Cluster) -> None:
    cluster.enqueue_on("m2", 2)
    cluster.bad.error = ERRORS["unavailable"]
    assert cluster.svc.dequeue(Q, 5) == []
    assert cluster.tokens_left() == BURST


@pytest.mark.parametrize("kind", ["write_refused", "storage"])
def test_a_dry_run_shows_the_other_shards_jobs(cluster: Cluster, kind: str) -> None:
    on_good = cluster.enqueue_on("m1", 2)
    cluster.enqueue_on("m2", 2)
    cluster.bad.error = ERRORS[kind]
    peeked = cluster.svc.dequeue(Q, 10, dry_run=True)
    assert sorted(j.descriptor for j in peeked) == sorted(on_good) and {j.claim for j in peeked} == {""}
    assert {i.state for i in cluster.svc.lookup(on_good).values()} == {JobState.PENDING}


def test_a_dry_run_that_finds_nothing_raises_the_shards_error(cluster: Cluster) -> None:
    cluster.enqueue_on("m2", 2)
    cluster.bad.error = ERRORS["write_refused"]
    with pytest.raises(ShardWriteRefused):
        cluster.svc.dequeue(Q, 10, dry_run=True)


@pytest.mark.parametrize("kind", ["unavailable", "write_refused", "busy"])
def test_an_enqueue_goes_to_another_shard_when_nothing_was_written(cluster: Cluster, kind: str) -> None:
    cluster.bad.error = ERRORS[kind]
    cluster.order = ["m2", "m1"]  # the failing shard is tried first, every time
    descriptors = [d for _ in range(5) for d in cluster.svc.enqueue(Q, [Job(b"x")] * 2)]
    assert {JobDescriptor.parse(d).shard for d in descriptors} == {"m1"}
    assert len(cluster.svc.lookup(descriptors)) == 10
    health = cluster.shards.status()["m2"]
    if kind == "busy":  # load: the shard stays in rotation
        assert health.healthy and health.out_reason is None
    else:
        assert not health.healthy
        assert health.out_reason == (REFUSES_WRITES if kind == "write_refused" else UNAVAILABLE)


def test_an_enqueue_fails_when_every_shard_refuses_writes(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.bad.error = ERRORS["write_refused"]
    monkeypatch.setattr(cluster.good, "enqueue", cluster.bad.enqueue)
    with pytest.raises(NoHealthyShards, match="refuses writes"):
        cluster.svc.enqueue(Q, [Job(b"x")])


def test_a_dequeue_ends_its_walk_at_a_shard_that_went_silent_after_the_call_was_sent(cluster: Cluster) -> None:
    """That shard may have claimed all it was asked for (its reply lost),
    which a capped dequeue counts as running: the other shard waits for the
    next dequeue, when the silent one is out of rotation."""
    on_good = cluster.enqueue_on("m1", 3)
    cluster.enqueue_on("m2", 3)
    cluster.bad.error = ShardOutcomeUnknown(
        "memory shard m2 unavailable after a command was sent (it may have run): Timeout reading")
    cluster.order = ["m2", "m1"]
    assert cluster.svc.dequeue(Q, 8) == []
    assert cluster.good.count(Q, 1, JobState.RUNNING, False) == 0
    assert cluster.shards.status()["m2"].out_reason == UNAVAILABLE
    assert sorted(j.descriptor for j in cluster.svc.dequeue(Q, 8)) == sorted(on_good)


def test_an_enqueue_sent_before_its_shard_went_silent_is_not_sent_to_another(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.bad.error = ShardOutcomeUnknown(
        "memory shard m2 unavailable after a command was sent (it may have run): Timeout reading")
    cluster.order = ["m2", "m1"]
    with pytest.raises(EnqueueOutcomeUnknown, match="not retried on another shard: shard m2 went silent") as raised:
        cluster.svc.enqueue(Q, [Job(b"x")] * 2)
    assert raised.value.code == ErrorCode.SHARD_CONNECTION_FAILED
    assert cluster.good.count(Q, 1, JobState.PENDING, False) == 0
    assert cluster.shards.status()["m2"].out_reason == UNAVAILABLE
    # With a key, a retry is refused while the first try's reservation holds
    # (its jobs may be on m2), not stored on m1.
    silent, cluster.bad.error = cluster.bad.error, None
    cluster.shards.probe_once()  # back in rotation
    cluster.bad.error = silent
    monkeypatch.setattr(idempotency, "WAIT_S", 0.05)
    with pytest.raises(EnqueueOutcomeUnknown):
        cluster.svc.enqueue(Q, [Job(b"y")], idempotency_key="k")
    cluster.bad.error = None
    with pytest.raises(EnqueueRejected, match="idempotency key 'k' on 'q' is still running"):
        cluster.svc.enqueue(Q, [Job(b"y")], idempotency_key="k")
    assert cluster.good.count(Q, 1, JobState.PENDING, False) == 0


def test_an_enqueue_does_not_try_again_after_an_error_that_may_have_written(cluster: Cluster) -> None:
    cluster.bad.error = ERRORS["storage"]
    cluster.order = ["m2", "m1"]
    with pytest.raises(StorageError, match="something broke"):
        cluster.svc.enqueue(Q, [Job(b"x")])
    assert cluster.good.count(Q, 1, JobState.PENDING, False) == 0


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_acks_on_a_failing_shard_are_reported_unapplied(cluster: Cluster, kind: str) -> None:
    cluster.enqueue_on("m1", 2)
    cluster.enqueue_on("m2", 2)
    jobs = cluster.svc.dequeue(Q, 10)
    assert len(jobs) == 4
    cluster.bad.error = ERRORS[kind]
    with pytest.raises(AckNotApplied) as raised:
        cluster.svc.ack(Q, succeeded=[Ack(j.descriptor) for j in jobs[:3]], failed=[Ack(jobs[3].descriptor)])
    result = raised.value.result
    by_shard = {s: sorted(j.descriptor for j in jobs if JobDescriptor.parse(j.descriptor).shard == s)
                for s in ("m1", "m2")}
    assert sorted(result.acked) == by_shard["m1"] and sorted(result.unapplied) == by_shard["m2"]
    assert not result.stale
    # It crosses a process boundary whole (a pool's worker raising it).
    copied = pickle.loads(pickle.dumps(raised.value))
    assert (str(copied), copied.result) == (str(raised.value), result)


def test_the_probe_keeps_a_shard_that_refuses_writes_out_until_it_writes(cluster: Cluster) -> None:
    shards = cluster.shards
    cluster.bad.error = ERRORS["write_refused"]
    for _ in range(3):  # it answers a ping, and stays out
        shards.probe_once()
        cluster.bad.ping()
        health = shards.status()["m2"]
        assert (health.healthy, health.out_reason) == (False, REFUSES_WRITES)
        assert "refuses writes" in (health.last_error or "")
    cluster.bad.error = ERRORS["busy"]  # no connection for the probe: no verdict
    shards.probe_once()
    assert not shards.is_healthy("m2")
    cluster.bad.error = None
    shards.probe_once()
    health = shards.status()["m2"]
    assert (health.healthy, health.out_reason) == (True, None)
    cluster.bad.error = ERRORS["busy"]  # nor does a busy probe take a shard out
    shards.probe_once()
    assert shards.is_healthy("m2")


class Clock:
    """The shard set's clocks, moved by hand: ``now`` moves both; ``wall``
    steps the wall clock alone, as a host's time sync does."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.wall = 0.0

    def time(self) -> float:
        return self.now + self.wall

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def perf_counter() -> float:
        return time.perf_counter()


def test_a_shard_whose_probe_fits_but_whose_writes_do_not_is_held_out_longer_each_time(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk too full for jobs still takes the probe's small write: each
    time the shard comes back and refuses writes again within a minute, it
    stays out for a hold that doubles (2, 4, 8 s ...), so it does not flap
    in and out at every probe; a shard that keeps writing for the minute
    starts afresh."""
    clock = Clock()
    monkeypatch.setattr("pinlater.engine.shards.time", clock)
    shards = cluster.shards
    monkeypatch.setattr(cluster.bad, "probe", lambda: None)  # the probe's write fits

    def refused_again() -> None:
        cluster.bad.error = ERRORS["write_refused"]
        cluster.order = ["m2", "m1"]
        assert {JobDescriptor.parse(d).shard for d in cluster.svc.enqueue(Q, [Job(b"x")])} == {"m1"}
        cluster.order = ["m1", "m2"]
        assert not shards.is_healthy("m2")

    refused_again()  # the first time: back at its next good probe
    assert shards.status()["m2"].held_until == 0.0
    shards.probe_once()
    assert shards.is_healthy("m2")
    with caplog.at_level(logging.WARNING, logger="pinlater.engine.shards"):
        for hold in (2.0, 4.0, 8.0):
            clock.now += 5.0
            refused_again()  # 5 s after it came back
            health = shards.status()["m2"]
            assert (health.hold_s, health.held_until) == (hold, clock.now + hold)
            clock.now += hold - 0.1
            shards.probe_once()
            assert not shards.is_healthy("m2")
            clock.now += 0.1
            shards.probe_once()
            assert shards.is_healthy("m2")
    said = [r.getMessage() for r in caplog.records if "at least" in r.getMessage()]
    assert len(said) == 3 and "for 8 s at least: it refused writes again 5.0 s after it came back" in said[-1]
    # Writing for a minute: the next refusal is a first one again.
    clock.now += 61.0
    refused_again()
    assert shards.status()["m2"].held_until == 0.0
    shards.probe_once()
    assert shards.is_healthy("m2")
    # Other failures hold nothing: a connection lost is back at its next good probe.
    shards.mark_down("m2", ConnectionResetError("reset"), UNAVAILABLE)
    assert shards.status()["m2"].held_until == 0.0
    shards.probe_once()
    assert shards.is_healthy("m2")


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
def test_a_hold_lasts_its_seconds_whatever_the_wall_clock_does(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, step_s: float
) -> None:
    """The wall clock set back (or on) an hour while a shard is held out:
    it is back after its hold, not an hour later; and a refusal 5 s after
    it came back is a second one, held, whatever the wall clock says."""
    clock = Clock()
    monkeypatch.setattr("pinlater.engine.shards.time", clock)
    shards = cluster.shards
    monkeypatch.setattr(cluster.bad, "probe", lambda: None)
    shards.mark_down("m2", ERRORS["write_refused"], REFUSES_WRITES)
    shards.probe_once()
    assert shards.is_healthy("m2")
    clock.now += 5.0
    clock.wall += step_s  # 5 s back in rotation, an hour on the wall clock
    shards.mark_down("m2", ERRORS["write_refused"], REFUSES_WRITES)
    health = shards.status()["m2"]
    assert health.hold_s == 2.0
    assert health.held_until == clock.time() + 2.0  # shown on the wall clock
    clock.wall += step_s  # and another hour while it is held
    clock.now += 1.9
    shards.probe_once()
    assert not shards.is_healthy("m2")
    clock.now += 0.1
    shards.probe_once()
    assert shards.is_healthy("m2")


def test_a_recovery_hook_that_fails_keeps_the_shard_out_with_its_error_in_one_line(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    shards = cluster.shards
    shards.mark_down("m2", ConnectionResetError("reset"))

    def hook(backend: object) -> None:
        raise MySQLStorageError("MySQL error 1040: Too many connections", 1040)

    shards.on_recover(hook)
    caplog.set_level(logging.WARNING, logger="pinlater.engine.shards")
    shards.probe_once()
    health = shards.status()["m2"]
    assert not health.healthy and "Too many connections" in (health.last_error or "")
    assert health.out_reason == "failing"
    assert [r.exc_info for r in caplog.records if "recovery hook" in r.getMessage()] == [None]


def test_a_recovery_hook_refused_a_write_holds_the_shard_out_as_refusing_writes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk that takes the probe's write but not the queues' tables
    the recovery makes: out for refusing writes, so each return is held
    longer, instead of back in rotation at every probe."""
    clock = Clock()
    monkeypatch.setattr("pinlater.engine.shards.time", clock)
    shards = cluster.shards
    shards.mark_down("m2", ERRORS["write_refused"], REFUSES_WRITES)

    def hook(backend: object) -> None:
        raise ERRORS["write_refused"]

    shards.on_recover(hook)
    holds = []
    for _ in range(4):
        clock.now += 200.0  # past any hold
        shards.probe_once()
        health = shards.status()["m2"]
        assert (health.healthy, health.out_reason) == (False, REFUSES_WRITES)
        holds.append(health.hold_s)
    assert holds == [2.0, 4.0, 8.0, 16.0]
