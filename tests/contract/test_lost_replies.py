"""A capped dequeue whose shard went silent after the call was sent (its
reply lost, ``ShardOutcomeUnknown``) on every setup: the jobs the shard
claimed are RUNNING though nobody was handed them, so the slots the call
took stay held, in doubt, until those claims have expired and a monitor
pass had time to end them; the cap is never exceeded meanwhile, and the
slots are free again after."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from pinlater import Job, JobService, JobState
from pinlater.engine import slots
from pinlater.operators import Monitor
from pinlater.stores.base import ShardBackend, ShardOutcomeUnknown
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
