"""A queue's concurrency cap (``QueueConfig.max_running``) on every setup:
what takes a slot, what frees one, the monitor settling what no call
ended, and bad caps refused with nothing stored."""

from __future__ import annotations

import contextlib
import math
import time

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import DequeueRateLimited, InvalidRequest
from pinlater.operators import Monitor
from pinlater.stores.base import AckItem
from tests.support.caps import most_running


def _held(cluster: JobService, queue: str) -> dict[str, int]:
    return cluster.core.control.slots_read(queue)[1]


def test_a_cap_bounds_the_jobs_running_and_each_end_of_a_claim_frees_a_slot(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_running=3)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=5) for _ in range(12)])
    first = cluster.dequeue(queue_name, 10)
    assert len(first) == 3
    assert cluster.dequeue(queue_name, 10) == []  # full: an empty answer, as an empty queue gives
    assert cluster.count(queue_name, JobState.RUNNING) == 3
    assert sorted(_held(cluster, queue_name)) == sorted(d.descriptor[len(queue_name) + 2:] for d in first)

    cluster.ack(queue_name, succeeded=[Ack(first[0].descriptor)])
    [second] = cluster.dequeue(queue_name, 10)
    cluster.ack(queue_name, failed=[Ack(first[1].descriptor)])
    [third] = cluster.dequeue(queue_name, 10)
    # A heartbeat keeps the slot; a move back to PENDING frees it.
    cluster.checkpoint(queue_name, [Checkpoint(first[2].descriptor)])
    assert cluster.dequeue(queue_name, 10) == []
    cluster.checkpoint(queue_name, [Checkpoint(first[2].descriptor, move_to_pending=True)])
    assert len(cluster.dequeue(queue_name, 10)) == 1
    assert cluster.count(queue_name, JobState.RUNNING) == 3
    assert len(_held(cluster, queue_name)) == 3
    # A stale ACK frees nothing: the slots stay those of the jobs running.
    cluster.ack(queue_name, succeeded=[Ack(first[0].descriptor)])
    assert len(_held(cluster, queue_name)) == 3
    assert cluster.dequeue(queue_name, 10) == []
    cluster.ack(queue_name, succeeded=[Ack(second.descriptor), Ack(third.descriptor)])
    assert len(cluster.dequeue(queue_name, 10)) == 2


def test_riding_acks_free_their_slots_whether_or_not_the_dequeue_takes_any(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_running=2)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(8)])
    first = cluster.dequeue(queue_name, 5)
    second = cluster.dequeue(queue_name, 5, succeeded=[Ack(j.descriptor, claim=j.claim) for j in first])
    assert len(second) == 2
    assert sorted(_held(cluster, queue_name)) == sorted(j.descriptor[len(queue_name) + 2:] for j in second)
    cluster.pause(queue_name)
    with pytest.raises(DequeueRateLimited):
        cluster.dequeue(queue_name, 5, succeeded=[Ack(j.descriptor) for j in second])
    assert _held(cluster, queue_name) == {}
    cluster.resume(queue_name)
    assert len(cluster.dequeue(queue_name, 5)) == 2


def test_a_claim_that_expires_frees_its_slot_in_the_monitors_pass(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, max_running=2, claim_timeout_ms=100)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=5) for _ in range(4)])
    crashed = cluster.dequeue(queue_name, 5)
    assert len(crashed) == 2
    time.sleep(0.25)
    assert cluster.dequeue(queue_name, 5) == []  # expired, but not yet settled: still counted
    stats = Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert stats.claims_repended == 2 and stats.slots_freed == 2
    again = cluster.dequeue(queue_name, 5)
    assert len(again) == 2
    # The crashed worker's late ACKs are stale and free nothing.
    result = cluster.ack(queue_name, succeeded=[Ack(d.descriptor, claim=d.claim) for d in crashed])
    assert len(result.stale) == 2
    assert len(_held(cluster, queue_name)) == 2


def test_a_free_lost_between_the_two_steps_is_settled_by_the_monitor(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, max_running=2)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(3)])
    jobs = cluster.dequeue(queue_name, 5)
    # The ACK's shard step, without its free (a process dying in between).
    for j in jobs:
        d = j.descriptor.split(":")
        backend = cluster.core.shards.get(d[1][1:])
        backend.ack_succeeded(queue_name, [AckItem(int(d[2][1:]), int(d[3]), cluster.source, "", j.claim)])
    assert cluster.dequeue(queue_name, 5) == []
    time.sleep(0.01)
    stats = Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert stats.slots_freed == 2
    assert len(cluster.dequeue(queue_name, 5)) == 1


def test_a_cap_set_on_a_busy_queue_counts_the_jobs_already_running(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(10)])
    running = cluster.dequeue(queue_name, 5)
    config = cluster.set_concurrency(queue_name, 3)
    assert config.max_running == 3
    assert cluster.queue_config(queue_name, fresh=True).max_running == 3
    assert cluster.dequeue(queue_name, 5) == []
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor) for j in running[:3]])
    assert len(cluster.dequeue(queue_name, 5)) == 1  # 2 still running of the cap's 3
    # Removed: no cap, and no slot left behind to count when one is set again.
    cluster.set_concurrency(queue_name, None)
    assert _held(cluster, queue_name) == {}
    assert len(cluster.dequeue(queue_name, 5)) == 4


def test_many_dequeuers_never_hold_more_than_the_cap(cluster: JobService, queue_name: str) -> None:
    cap = 4
    cluster.create_queue(queue_name, max_running=cap)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(300)])
    done, most = most_running(
        lambda i: contextlib.nullcontext(JobService(cluster.core.sibling(), source=f"w{i}")),
        queue_name, 300, workers=12, batch=lambda i: 1 + i % 3,
    )
    assert done == 300
    assert 1 <= most <= cap
    assert cluster.count(queue_name, JobState.SUCCEEDED) == 300
    assert _held(cluster, queue_name) == {}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", 10**7, math.nan, 2**63])
def test_a_bad_cap_is_refused_in_one_line_and_nothing_is_stored(
    cluster: JobService, queue_name: str, bad: object
) -> None:
    cluster.create_queue(queue_name, max_running=5)
    with pytest.raises(InvalidRequest, match="max_running must be a whole number of jobs from 1 to 1000000") as info:
        cluster.update_queue(queue_name, max_running=bad)
    assert "\n" not in str(info.value)
    assert cluster.queue_config(queue_name, fresh=True).max_running == 5
    with pytest.raises(InvalidRequest, match="max_running"):
        cluster.create_queue(f"{queue_name}_b", max_running=bad)  # type: ignore[arg-type]
    assert f"{queue_name}_b" not in cluster.queue_names()
