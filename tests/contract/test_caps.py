"""A queue's concurrency cap (``QueueConfig.max_running``) on every setup:
what takes a slot, what frees one, the monitor settling what a process
that left held, and bad caps refused with nothing stored."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import replace

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.engine.slots import Slots
from pinlater.errors import DequeueRateLimited, InvalidRequest
from pinlater.operators import Monitor
from tests.support.caps import most_running
from tests.support.waits import wait_for


def _held(cluster: JobService, queue: str) -> int:
    """The slots held in the control store, over every process."""
    return sum(held for held, _ in cluster.core.control.slots_owners(queue)[1].values())


def test_a_cap_bounds_the_jobs_running_and_each_end_of_a_claim_frees_a_slot(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_running=3)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=5) for _ in range(12)])
    first = cluster.dequeue(queue_name, 10)
    assert len(first) == 3
    assert cluster.dequeue(queue_name, 10) == []  # full: an empty answer, as an empty queue gives
    assert cluster.count(queue_name, JobState.RUNNING) == 3
    assert _held(cluster, queue_name) == 3

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
    assert _held(cluster, queue_name) == 3
    # A stale ACK frees nothing.
    cluster.ack(queue_name, succeeded=[Ack(first[0].descriptor)])
    assert cluster.dequeue(queue_name, 10) == []
    cluster.ack(queue_name, succeeded=[Ack(second.descriptor), Ack(third.descriptor)])
    assert len(cluster.dequeue(queue_name, 10)) == 2
    assert _held(cluster, queue_name) == 3


def test_riding_acks_free_their_slots_whether_or_not_the_dequeue_takes_any(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_running=2)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(8)])
    first = cluster.dequeue(queue_name, 5)
    second = cluster.dequeue(queue_name, 5, succeeded=[Ack(j.descriptor, claim=j.claim) for j in first])
    assert len(second) == 2
    assert _held(cluster, queue_name) == 2
    cluster.pause(queue_name)
    with pytest.raises(DequeueRateLimited):
        cluster.dequeue(queue_name, 5, succeeded=[Ack(j.descriptor) for j in second])
    # Slots not used again soon go back to the store.
    wait_for(lambda: _held(cluster, queue_name) == 0, "the spare slots given back", 5)
    cluster.resume(queue_name)
    assert len(cluster.dequeue(queue_name, 5)) == 2


def test_a_claim_that_expires_frees_its_slot_once_the_monitor_ends_it(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, max_running=2, claim_timeout_ms=100)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=5) for _ in range(4)])
    stuck = cluster.dequeue(queue_name, 5)
    assert len(stuck) == 2
    time.sleep(0.25)
    assert cluster.dequeue(queue_name, 5) == []  # expired, but still RUNNING: still counted
    stats = Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert stats.claims_repended == 2
    # The process that claimed them finds them ended within a second.
    again = wait_for(lambda: cluster.dequeue(queue_name, 5), "the expired claims' slots", 5, 0.1)
    assert len(again) == 2
    # The late ACKs are stale and free nothing.
    result = cluster.ack(queue_name, succeeded=[Ack(d.descriptor, claim=d.claim) for d in stuck])
    assert len(result.stale) == 2
    assert cluster.dequeue(queue_name, 5) == []
    assert _held(cluster, queue_name) == 2


def test_a_process_that_leaves_with_jobs_running_is_settled_by_the_monitor(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_running=3)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(8)])
    # Another process: its own slots' owner over the same stores.
    core = cluster.core
    other = JobService(replace(core.sibling(), slots=Slots(core.control, core.shards)), source="leaving")
    gone = other.dequeue(queue_name, 2)
    assert len(gone) == 2
    other.core.slots.close()
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert _held(cluster, queue_name) == 2  # its two running jobs, its spare slots given back
    [mine] = cluster.dequeue(queue_name, 5)
    # Another process ACKs them: the monitor's next pass frees the leaver's
    # slots. (Were that process's free of a leaver's slot applied, a pass
    # that had counted the job gone already would see it counted twice.)
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in gone])
    time.sleep(0.3)  # the ACKing process's next store steps, whose frees of the leaver's slots are not applied
    assert cluster.dequeue(queue_name, 5) == []
    assert _held(cluster, queue_name) == 3
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    more = wait_for(lambda: cluster.dequeue(queue_name, 5), "the leaver's slots freed", 5, 0.1)
    assert len(more) == 2
    cluster.ack(queue_name, succeeded=[Ack(mine.descriptor), *[Ack(j.descriptor) for j in more]])


def test_a_cap_set_on_a_busy_queue_counts_the_jobs_already_running(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x") for _ in range(10)])
    running = cluster.dequeue(queue_name, 5)
    config = cluster.set_concurrency(queue_name, 3)
    assert config.max_running == 3
    assert cluster.queue_config(queue_name, fresh=True).max_running == 3
    assert _held(cluster, queue_name) == 5
    assert cluster.dequeue(queue_name, 5) == []
    # ACKed without their claims (as a stock client does): looked up first.
    # Their owners are the monitor's (settled when the cap was set), so its
    # next pass frees their slots.
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor) for j in running[:3]])
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    got = wait_for(lambda: cluster.dequeue(queue_name, 5), "a slot of the 3 freed", 5, 0.1)
    assert len(got) == 1  # 2 still running of the cap's 3
    cluster.set_concurrency(queue_name, None)
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
    wait_for(lambda: _held(cluster, queue_name) == 0, "every slot given back", 5)


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
