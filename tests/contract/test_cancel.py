"""Cancel on every setup: a pending job ends FAILED ``[cancelled]`` and never
runs; a running one ends at once, its ACK stale and its heartbeat told it
was cancelled; a finished one is left as it was; the slots of a capped
queue and the turns of keyed lanes stay right; bad input is refused."""

from __future__ import annotations

import pytest

from pinlater import CANCELLED_STATUS, Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import InvalidRequest, PriorityNotSupported


def _state(cluster: JobService, descriptor: str) -> tuple[JobState, str]:
    info = cluster.lookup([descriptor])[descriptor]
    return info.state, info.custom_status


def test_pending_running_finished_and_unknown_jobs(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    pending, running, done, later = cluster.enqueue(
        queue_name, [Job(b"a", attempts_allowed=5), Job(b"b", attempts_allowed=5), Job(b"c"), Job(b"d")])
    claimed = {j.descriptor: j for j in cluster.dequeue(queue_name, 4)}
    # Put two back to PENDING (no attempt spent), finish one, keep one running.
    cluster.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True, claim=claimed[d].claim)
                                    for d in (pending, later)])
    cluster.ack(queue_name, succeeded=[Ack(done, claim=claimed[done].claim)])
    shard = cluster.operators.shard_ids()[0]
    unknown = f"{queue_name}:s{shard}:p1:999999"

    result = cluster.cancel(queue_name, [pending, running, done, unknown])
    assert (result.cancelled, result.interrupted, result.finished, result.unknown, result.unapplied) == (
        [pending], [running], [done], [unknown], {})
    for d in (pending, running):
        state, status = _state(cluster, d)
        assert state is JobState.FAILED and status.endswith(CANCELLED_STATUS)
        assert cluster.lookup([d])[d].attempts_remaining == 0
    assert _state(cluster, done)[0] is JobState.SUCCEEDED

    # The pending one never runs; the other pending job does.
    assert [j.descriptor for j in cluster.dequeue(queue_name, 10)] == [later]
    # The running one's run learns it: its heartbeat is stale and says
    # cancelled; its ACK changes nothing and nothing is retried.
    beat = cluster.checkpoint(queue_name, [Checkpoint(running, claim=claimed[running].claim)])
    assert (beat.acked, beat.stale, beat.cancelled) == ([], [running], [running])
    failure = cluster.ack(queue_name, failed=[Ack(running, claim=claimed[running].claim)])
    assert failure.stale == [running]
    assert _state(cluster, running)[0] is JobState.FAILED
    assert cluster.count(queue_name, "pending") == 0

    # Again: nothing left to cancel.
    again = cluster.cancel(queue_name, [pending, running])
    assert again.finished == [pending, running] and not again.cancelled and not again.interrupted


def test_a_heartbeat_that_lost_its_claim_otherwise_is_not_told_cancelled(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    [d] = cluster.enqueue(queue_name, [Job(b"x")])
    [job] = cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, failed=[Ack(d, claim=job.claim)])  # its last attempt: FAILED, not cancelled
    beat = cluster.checkpoint(queue_name, [Checkpoint(d, claim=job.claim)])
    assert beat.stale == [d] and beat.cancelled == []


def test_cancelling_a_running_job_of_a_capped_queue_frees_its_slot(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, max_running=1)
    first, second = cluster.enqueue(queue_name, [Job(b"1"), Job(b"2")])
    [job] = cluster.dequeue(queue_name, 5)
    assert cluster.dequeue(queue_name, 5) == []  # the cap is full
    assert cluster.cancel(queue_name, [job.descriptor]).interrupted == [job.descriptor]
    assert [j.descriptor for j in cluster.dequeue(queue_name, 5)] == [second if job.descriptor == first else first]


def test_keyed_pending_jobs_leave_their_lanes(cluster: JobService, queue_name: str) -> None:
    """A cancelled keyed job is out of its lane: the lanes serve the rest
    in turn, and a lane with nothing left is not waited for."""
    cluster.create_queue(queue_name, priorities=1)
    a1, a2, b1, c1 = cluster.enqueue(queue_name, [Job(b"a1", key="A"), Job(b"a2", key="A"),
                                                  Job(b"b1", key="B"), Job(b"c1", key="C")])
    result = cluster.cancel(queue_name, [a1, b1])
    assert sorted(result.cancelled) == sorted([a1, b1])
    got = [j.descriptor for j in cluster.dequeue(queue_name, 10)]
    assert sorted(got) == sorted([a2, c1])
    assert cluster.dequeue(queue_name, 10) == []


def test_bad_input_is_refused_and_nothing_changes(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, priorities=2)
    [d] = cluster.enqueue(queue_name, [Job(b"x")])
    shard = cluster.operators.shard_ids()[0]
    with pytest.raises(InvalidRequest, match="not in queue"):
        cluster.cancel(queue_name, [d, f"other:s{shard}:p1:1"])
    with pytest.raises(InvalidRequest, match="malformed"):
        cluster.cancel(queue_name, ["nope"])
    with pytest.raises(PriorityNotSupported):
        cluster.cancel(queue_name, [f"{queue_name}:s{shard}:p7:1"])
    with pytest.raises(InvalidRequest, match="shard"):
        cluster.cancel(queue_name, [f"{queue_name}:sZZ9:p1:1"])
    too_many = [d] * (cluster.settings.max_jobs_per_call + 1)
    with pytest.raises(InvalidRequest):
        cluster.cancel(queue_name, too_many)
    assert _state(cluster, d)[0] is JobState.PENDING
    assert cluster.cancel(queue_name, []).cancelled == []


def test_ids_no_job_can_have_are_unknown_and_leave_the_shard_in_rotation(
    cluster: JobService, queue_name: str
) -> None:
    """Ids past what a store can hold (a Redis member holds 7 bytes of id)
    are no job, not a store's error: a shard's health counts those."""
    cluster.create_queue(queue_name)
    [d] = cluster.enqueue(queue_name, [Job(b"x")])
    shard = cluster.operators.shard_ids()[0]
    beyond = [f"{queue_name}:s{shard}:p1:{i}" for i in (2**56, 2**63 - 1, 10**19 - 1)]
    assert cluster.cancel(queue_name, [*beyond, d]).cancelled == [d]
    for _ in range(5):  # more than the errors that take a shard out
        result = cluster.cancel(queue_name, beyond)
        assert sorted(result.unknown) == sorted(beyond) and result.unapplied == {}
        assert cluster.lookup(beyond) == {}
    assert cluster.operators.shard_status()[shard].healthy


def test_a_job_has_one_spelling(cluster: JobService, queue_name: str) -> None:
    """Leading zeros are refused: one job named under several spellings
    would be answered, and its slot freed, once for each."""
    cluster.create_queue(queue_name, max_running=1)
    [d] = cluster.enqueue(queue_name, [Job(b"x")])
    [job] = cluster.dequeue(queue_name, 1)
    head, local_id = d.rsplit(":", 1)
    for other in (f"{head}:0{local_id}", d.replace(":p1:", ":p01:")):
        with pytest.raises(InvalidRequest, match="without leading zeros"):
            cluster.cancel(queue_name, [d, other])
    assert cluster.lookup([d])[d].state is JobState.RUNNING
    assert cluster.cancel(queue_name, [d, d]).interrupted == [job.descriptor]
