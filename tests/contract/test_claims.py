"""ACKs and checkpoints apply only to the claim they were given for
(``Ack.claim``, ``Checkpoint.claim``), on every backend: a late ACK of a
job's earlier run, even from the same source, is stale; a claim with a
copied source but another token is stale; without a claim the source
check of a client that sends none holds. Lookups and scans show a claim's
source, never its token."""

from __future__ import annotations

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import InvalidRequest
from pinlater.models import DequeuedJob, JobInfo
from tests.support.claims import claimed_again_after_timeout


def _info(cluster: JobService, descriptor: str) -> JobInfo:
    return cluster.lookup([descriptor], include_body=True)[descriptor]


def _claim_twice_after_timeout(cluster: JobService, queue: str) -> tuple[DequeuedJob, DequeuedJob]:
    """One job, claimed; its claim times out and the same source claims it again."""
    first, second = claimed_again_after_timeout(cluster, cluster.operators, queue)
    assert second.claim != first.claim
    assert second.claim.endswith("@test-worker-a")  # the same source both times
    return first, second


def _claim_twice(cluster: JobService, queue: str) -> tuple[DequeuedJob, DequeuedJob]:
    """One job, claimed, put back by its holder and claimed again by the
    same source: its claim re-made without waiting for a timeout."""
    cluster.create_queue(queue)
    cluster.enqueue(queue, [Job(b"body", attempts_allowed=5)])
    [first] = cluster.dequeue(queue, 1)
    moved = cluster.checkpoint(queue, [Checkpoint(first.descriptor, move_to_pending=True, claim=first.claim)])
    assert moved.acked == [first.descriptor]
    [second] = cluster.dequeue(queue, 1)
    assert second.descriptor == first.descriptor and second.claim != first.claim
    return first, second


def test_a_late_ack_of_a_timed_out_run_is_stale_for_the_same_source(cluster: JobService, queue_name: str) -> None:
    first, second = _claim_twice_after_timeout(cluster, queue_name)
    d = first.descriptor
    before = _info(cluster, d)
    assert (before.state, before.attempts_remaining) == (JobState.RUNNING, 4)
    # The first run ends late: its failure ACK, success ACK and checkpoints change nothing.
    assert cluster.ack(queue_name, failed=[Ack(d, "late", retry_delay_ms=5, claim=first.claim)]).stale == [d]
    assert cluster.ack(queue_name, succeeded=[Ack(d, "late", claim=first.claim)]).stale == [d]
    late = [Checkpoint(d, new_body=b"late", attempts_allowed=9, prepend_custom_status="late", claim=first.claim)]
    assert cluster.checkpoint(queue_name, late).stale == [d]
    assert cluster.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True, claim=first.claim)]).stale == [d]
    assert _info(cluster, d) == before
    # The second run's own ACK applies.
    result = cluster.ack(queue_name, failed=[Ack(d, "run 2", retry_delay_ms=60_000, claim=second.claim)])
    assert (result.acked, result.stale) == ([d], [])
    after = _info(cluster, d)
    assert (after.state, after.attempts_remaining, after.custom_status) == (JobState.PENDING, 3, "run 2")


def test_a_claim_applies_whatever_the_callers_source_and_only_with_its_token(
    cluster: JobService, other_worker: JobService, queue_name: str
) -> None:
    first, second = _claim_twice(cluster, queue_name)
    d = second.descriptor
    before = _info(cluster, d)
    # A copied source (lookups show it) with a made-up token, or the first run's token, is stale...
    forged = "0123456789abcdef@test-worker-a"
    assert other_worker.ack(queue_name, succeeded=[Ack(d, claim=forged)]).stale == [d]
    assert cluster.ack(queue_name, failed=[Ack(d, claim=forged)]).stale == [d]
    assert cluster.checkpoint(queue_name, [Checkpoint(d, new_body=b"x", claim=forged)]).stale == [d]
    assert cluster.ack(queue_name, succeeded=[Ack(d, claim=first.claim)], source="test-worker-b").stale == [d]
    assert _info(cluster, d) == before
    # ...while the live claim settles the job from any caller's source.
    beat = other_worker.checkpoint(queue_name, [Checkpoint(d, prepend_custom_status="beat;", claim=second.claim)])
    assert beat.acked == [d]
    assert other_worker.ack(queue_name, succeeded=[Ack(d, "done", claim=second.claim)]).acked == [d]
    info = _info(cluster, d)
    assert (info.state, info.custom_status) == (JobState.SUCCEEDED, "beat;done")


def test_without_a_claim_the_callers_source_decides(
    cluster: JobService, other_worker: JobService, queue_name: str
) -> None:
    # A client that sends no claims (a stock Thrift client) keeps the source check.
    _, second = _claim_twice(cluster, queue_name)
    d = second.descriptor
    assert other_worker.ack(queue_name, failed=[Ack(d)]).stale == [d]
    assert other_worker.checkpoint(queue_name, [Checkpoint(d, new_body=b"x")]).stale == [d]
    assert cluster.checkpoint(queue_name, [Checkpoint(d, prepend_custom_status="beat;", claim="")]).acked == [d]
    assert cluster.ack(queue_name, succeeded=[Ack(d, "done")]).acked == [d]
    assert _info(cluster, d).state is JobState.SUCCEEDED


def test_one_batch_settles_each_entry_by_its_own_claim(cluster: JobService, queue_name: str) -> None:
    # Entries with claims and without, and one job twice (a late entry beside
    # the live one), in one call per kind: each is decided alone.
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"a"), Job(b"b"), Job(b"c"), Job(b"d")])
    # One call at a time: the jobs of one dequeue call share its claim.
    a, b, c, d = (cluster.dequeue(queue_name, 1)[0] for _ in range(4))
    assert [x.body for x in (a, b, c, d)] == [b"a", b"b", b"c", b"d"]
    moved = cluster.checkpoint(queue_name, [Checkpoint(a.descriptor, move_to_pending=True, claim=a.claim)])
    assert moved.acked == [a.descriptor]
    [a2] = cluster.dequeue(queue_name, 1)
    result = cluster.ack(
        queue_name,
        succeeded=[Ack(a.descriptor, claim=a.claim), Ack(b.descriptor, claim=b.claim), Ack(c.descriptor)],
        failed=[Ack(a2.descriptor, claim=a2.claim, retry_delay_ms=60_000), Ack(d.descriptor, claim=a.claim)],
    )
    assert sorted(result.acked) == sorted([b.descriptor, c.descriptor, a2.descriptor])
    assert sorted(result.stale) == sorted([a.descriptor, d.descriptor])
    states = {x.descriptor: _info(cluster, x.descriptor).state for x in (a, b, c, d)}
    assert states == {a.descriptor: JobState.PENDING, b.descriptor: JobState.SUCCEEDED,
                      c.descriptor: JobState.SUCCEEDED, d.descriptor: JobState.RUNNING}
    # Checkpoints likewise, riding ACKs on a dequeue too.
    checked = cluster.checkpoint(queue_name, [Checkpoint(d.descriptor, claim=a.claim), Checkpoint(d.descriptor)])
    assert (checked.stale, checked.acked) == ([d.descriptor], [d.descriptor])
    cluster.dequeue(queue_name, 1, succeeded=[Ack(d.descriptor, claim=d.claim)])
    assert _info(cluster, d.descriptor).state is JobState.SUCCEEDED


@pytest.mark.parametrize("claim", ["nope", "0123456789ABCDEF@test-worker-a", "0123456789abcdef@", "0123456789abcdef",
                                   "0123456789abcdef@" + "s" * 201])
def test_a_malformed_claim_is_refused_and_changes_nothing(cluster: JobService, queue_name: str, claim: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"body")])
    [job] = cluster.dequeue(queue_name, 1)
    before = _info(cluster, job.descriptor)
    for call in (
        lambda: cluster.ack(queue_name, succeeded=[Ack(job.descriptor), Ack(job.descriptor, claim=claim)]),
        lambda: cluster.ack(queue_name, failed=[Ack(job.descriptor, claim=claim)]),
        lambda: cluster.checkpoint(queue_name, [Checkpoint(job.descriptor, move_to_pending=True, claim=claim)]),
        lambda: cluster.dequeue(queue_name, 1, succeeded=[Ack(job.descriptor, claim=claim)]),
    ):
        with pytest.raises(InvalidRequest, match="claim must be a dequeued job's claim") as raised:
            call()
        assert "\n" not in str(raised.value) and claim[:16] not in str(raised.value)
    assert _info(cluster, job.descriptor) == before


def test_lookups_and_scans_show_the_claims_source_never_its_token(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"body")])
    [job] = cluster.dequeue(queue_name, 1)
    token = job.claim.split("@", 1)[0]
    assert _info(cluster, job.descriptor).claim == "test-worker-a"
    [scanned] = cluster.scan(queue_name, JobState.RUNNING).jobs
    assert (scanned.descriptor, scanned.claim) == (job.descriptor, "test-worker-a")
    assert token not in repr(_info(cluster, job.descriptor)) and token not in repr(scanned)
