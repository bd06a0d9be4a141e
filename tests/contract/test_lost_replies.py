"""A capped dequeue whose shard went silent after the call was sent (its
reply lost, ``ShardOutcomeUnknown``) on every setup: the jobs the shard
claimed are RUNNING though nobody was handed them, so the slots the call
took stay held, in doubt, until those claims have expired and a monitor
pass had time to end them; the cap is never exceeded meanwhile, and the
slots are free again after. And a slot step of the control store whose
reply was lost: if it ran, what it freed or gave back is not freed or
spare again; if it did not, the slots it held are settled once its owner
has nothing running."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.engine import key_slots, slots
from pinlater.engine.key_slots import KeySlots
from pinlater.engine.slots import Slots, SlotsUnavailable
from pinlater.operators import Monitor
from pinlater.stores.base import ShardBackend, ShardOutcomeUnknown
from pinlater.stores.control import ControlStore
from tests.support.caps import held_per_key, most_at_once, work_with_spans
from tests.support.waits import wait_for

CLAIM_TIMEOUT_MS = 1000
DOUBT_EXTRA_S = 1.0


def _lose_the_next_reply_with_jobs(cluster: JobService, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next dequeue call that claims jobs on its shard claims them
    there, and its caller hears only that the shard went silent."""
    shards = cluster.core.shards
    call = shards.call
    armed = [True]

    def lossy(backend: ShardBackend, op: str, queue: str | None, fn: Callable[[ShardBackend], Any]) -> Any:
        result = call(backend, op, queue, fn)
        if op == "dequeue" and armed and result.jobs:
            armed.clear()
            raise ShardOutcomeUnknown(f"shard {backend.shard_id} unavailable after a command was sent: Timeout")
        return result

    monkeypatch.setattr(shards, "call", lossy)


def _check_held_then_freed(cluster: JobService, queue: str, cap: int) -> None:
    assert cluster.dequeue(queue, cap) == []  # claimed on the shard, the reply lost
    lost_at = time.monotonic()
    assert cluster.count(queue, JobState.RUNNING) == cap
    cluster.core.shards.probe_once()  # the shard answers again
    assert cluster.dequeue(queue, cap) == []  # their slots still held
    monitor = Monitor(cluster.operators, queues=[queue])

    def dequeued() -> list[object]:
        monitor.run_once()  # ends the lost claims once they expire
        running = cluster.count(queue, JobState.RUNNING)
        got = cluster.dequeue(queue, cap)
        assert running + len(got) <= cap, "the cap was exceeded"
        return got  # type: ignore[return-value]

    got = wait_for(dequeued, "the slots in doubt freed", 20, 0.1)
    assert time.monotonic() - lost_at >= CLAIM_TIMEOUT_MS / 1000  # not before the claims expired
    assert len(got) == cap


def test_a_queue_caps_slots_a_lost_reply_may_use_stay_held_until_its_claims_expired(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "DOUBT_EXTRA_S", DOUBT_EXTRA_S)
    cluster.create_queue(queue_name, max_running=2, claim_timeout_ms=CLAIM_TIMEOUT_MS)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=5) for _ in range(6)])
    _lose_the_next_reply_with_jobs(cluster, monkeypatch)
    _check_held_then_freed(cluster, queue_name, 2)


def test_a_keys_slots_a_lost_reply_may_use_stay_held_until_its_claims_expired(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "DOUBT_EXTRA_S", DOUBT_EXTRA_S)
    cluster.create_queue(queue_name, claim_timeout_ms=CLAIM_TIMEOUT_MS)
    cluster.set_key_concurrency(queue_name, 2)
    cluster.enqueue(queue_name, [Job(b"a", key="A", attempts_allowed=5) for _ in range(6)])
    _lose_the_next_reply_with_jobs(cluster, monkeypatch)
    _check_held_then_freed(cluster, queue_name, 2)


class _Lossy:
    """The control store as one process sees it: once ``armed``, each slot
    step runs (``applies``) or not, and its reply is lost; with ``once``,
    only the first armed step's."""

    def __init__(self, control: ControlStore, applies: bool, steps: tuple[str, ...] = ("slots_sync", "key_slots_sync"),
                 once: bool = False) -> None:
        self.control, self.applies, self.armed, self.lost = control, applies, False, 0
        self.steps, self.once = steps, once

    def __getattr__(self, name: str) -> Any:
        return getattr(self.control, name)

    def slots_sync(self, *args: Any, **kwargs: Any) -> Any:
        return self._step(self.control.slots_sync, args, kwargs)

    def key_slots_sync(self, *args: Any, **kwargs: Any) -> Any:
        return self._step(self.control.key_slots_sync, args, kwargs)

    def _step(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        if not self.armed or fn.__name__ not in self.steps:
            return fn(*args, **kwargs)
        if self.applies:
            fn(*args, **kwargs)
        self.lost += 1
        # Disarmed here, not by the test: the process's own steps follow within milliseconds.
        self.armed = not self.once
        raise ShardOutcomeUnknown("control store unavailable after a command was sent (it may have run): Timeout")


@contextlib.contextmanager
def _process_over(cluster: JobService, control: _Lossy) -> Iterator[JobService]:
    """Another process whose slot steps go through ``control``."""
    core = cluster.core
    lossy: Any = control
    process = JobService(replace(core.sibling(), slots=Slots(lossy, core.shards),
                                 key_slots=KeySlots(lossy, core.shards, core.slots.claims_of)), source="lossy")
    try:
        yield process
    finally:
        control.armed = False
        process.core.slots.close()
        process.core.key_slots.close()


def _key_capped(cluster: JobService, queue: str) -> None:
    """At most 2 jobs of a key running; 6 of key K pending."""
    cluster.create_queue(queue)
    cluster.set_key_concurrency(queue, 2)
    cluster.enqueue(queue, [Job(b"k", key="K") for _ in range(6)])


def test_a_give_back_whose_reply_was_lost_is_not_spare_again(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, max_running=2)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(6)])
    control = _Lossy(cluster.core.control, applies=True)
    with _process_over(cluster, control) as process:
        first = process.dequeue(queue_name, 2)
        control.armed = True  # from now on the store runs its steps but it never hears back
        process.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in first])
        wait_for(lambda: control.lost, "the spare slots given back", 5)  # after IDLE_S
        assert len(cluster.dequeue(queue_name, 2)) == 2  # the store has them back
        with pytest.raises(SlotsUnavailable):
            process.dequeue(queue_name, 2)  # not with the slots it gave back
        assert cluster.count(queue_name, JobState.RUNNING) == 2


def test_a_key_slot_freed_by_a_step_whose_reply_was_lost_is_not_freed_twice(
    cluster: JobService, queue_name: str
) -> None:
    _key_capped(cluster, queue_name)
    control = _Lossy(cluster.core.control, applies=True)
    with _process_over(cluster, control) as process:
        first = process.dequeue(queue_name, 2)
        assert len(first) == 2
        control.armed = True
        process.ack(queue_name, succeeded=[Ack(first[0].descriptor, claim=first[0].claim)])
        wait_for(lambda: control.lost, "the free sent", 5)
        time.sleep(0.3)  # the process's steps go on meanwhile, each lost
        control.armed = False
        time.sleep(0.3)
        assert held_per_key(cluster, queue_name) == Counter({"K": 1})  # the one still running
        assert len(cluster.dequeue(queue_name, 5)) == 1


def test_a_key_slot_a_lost_step_did_not_free_is_settled_once_its_owner_is_idle(
    cluster: JobService, queue_name: str
) -> None:
    _key_capped(cluster, queue_name)
    # Only the free is lost: a lost leave too is trued up later (LATE_STEP_S).
    control = _Lossy(cluster.core.control, applies=False, once=True)
    with _process_over(cluster, control) as process:
        [first] = process.dequeue(queue_name, 1)
        control.armed = True
        process.ack(queue_name, succeeded=[Ack(first.descriptor, claim=first.claim)])
        wait_for(lambda: control.lost, "the free sent", 5)
        assert held_per_key(cluster, queue_name) == Counter({"K": 1})  # held, not used: safe, and settled below
        monitor = Monitor(cluster.operators, queues=[queue_name])

        def settled() -> bool:
            monitor.run_once()
            return held_per_key(cluster, queue_name) == Counter()

        wait_for(settled, "the slot the lost step did not free", 10, 0.1)
        assert len(cluster.dequeue(queue_name, 5)) == 2


def test_a_key_slot_a_lost_step_took_under_a_capped_queues_owner_is_freed_once_the_step_can_no_longer_apply(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A capped queue's owner keeps its name while its jobs run, so it cannot
    # leave to be settled: the process trues it up itself.
    late_s = 1.0
    monkeypatch.setattr(key_slots, "LATE_STEP_S", late_s)
    cluster.create_queue(queue_name, max_running=4)
    cluster.set_key_concurrency(queue_name, 1)
    cluster.enqueue(queue_name, [Job(b"k", key="K") for _ in range(3)] + [Job(b"l", key="L")])
    control = _Lossy(cluster.core.control, applies=True, steps=("key_slots_sync",))
    with _process_over(cluster, control) as process:
        [job] = process.dequeue(queue_name, 1)  # runs on, under the capped queue's owner
        running, other = ("K", "L") if job.body == b"k" else ("L", "K")
        control.armed = True  # the store takes the next step's slots; the process never hears back
        with pytest.raises(SlotsUnavailable):
            process.dequeue(queue_name, 3)
        lost_at = time.monotonic()
        control.armed = False
        assert control.lost >= 1
        assert held_per_key(cluster, queue_name) == Counter({running: 1, other: 1})
        assert cluster.dequeue(queue_name, 3) == []  # each key at its cap, one of them by a step's slot
        time.sleep(late_s / 3)
        assert held_per_key(cluster, queue_name)[other] == 1, "not trued up while the step could still apply"

        def trued_up() -> bool:
            return held_per_key(cluster, queue_name) == Counter({running: 1})

        wait_for(trued_up, "the slot the lost step took freed", 10, 0.05)
        assert time.monotonic() - lost_at >= late_s
        [freed] = cluster.dequeue(queue_name, 3)
        assert freed.body == other.lower().encode()
        assert held_per_key(cluster, queue_name) == Counter({"K": 1, "L": 1})


class _Flaky(_Lossy):
    """Each per-key slot step is lost at random, about a third of them,
    half of those after the store ran it."""

    def __init__(self, control: ControlStore, seed: int) -> None:
        super().__init__(control, applies=True, steps=("key_slots_sync",))
        self.armed = True
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def _step(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        if not self.armed or fn.__name__ not in self.steps:
            return fn(*args, **kwargs)
        # Drawn for the steps it may lose only: which of them are lost is the
        # seed's alone, not how they interleave with the queue cap's steps.
        with self._lock:
            lose, applies = self._random.random() < 0.35, self._random.random() < 0.5
        if not lose:
            return fn(*args, **kwargs)
        if applies:
            fn(*args, **kwargs)
        with self._lock:
            self.lost += 1
        raise ShardOutcomeUnknown("control store unavailable after a command was sent (it may have run): Timeout")


@pytest.mark.parametrize("seed", [1, 2])
def test_workers_whose_key_steps_are_lost_at_random_never_pass_a_keys_cap_and_finish(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(key_slots, "LATE_STEP_S", 0.3)
    cap, per_key, keys = 2, 10, (b"A", b"B", b"C")
    cluster.create_queue(queue_name, max_running=5)
    cluster.set_key_concurrency(queue_name, cap)
    cluster.enqueue(queue_name, [Job(k, key=k.decode()) for k in keys for _ in range(per_key)])
    spans: dict[bytes, list[tuple[float, float]]] = {k: [] for k in keys}
    lock = threading.Lock()
    control = _Flaky(cluster.core.control, seed)
    deadline = time.monotonic() + 60
    with _process_over(cluster, control) as process:

        def work(_: int) -> None:
            work_with_spans(process, queue_name, len(keys) * per_key, deadline, 0.02, spans, lock,
                            refused=(SlotsUnavailable,))

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(work, range(4)))
        assert control.lost > 0
        assert {k: len(s) for k, s in spans.items()} == {k: per_key for k in keys}, "a key was left blocked"
        assert all(most_at_once(s) <= cap for s in spans.values()), "a key ran more than its cap"
        control.armed = False
        wait_for(lambda: held_per_key(cluster, queue_name) == Counter(), "every per-key slot freed", 10, 0.05)
