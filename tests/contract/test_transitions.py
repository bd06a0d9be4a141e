"""Every row of DESIGN's transition table, against every backend setup,
the TLS ones included."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState, RetryPolicy
from pinlater.descriptor import JobDescriptor
from pinlater.models import DequeuedJob
from pinlater.operators import Monitor


def _one(cluster: JobService, queue: str, **job: object) -> str:
    [descriptor] = cluster.enqueue(queue, [Job(b"body", **job)])  # type: ignore[arg-type]
    return descriptor


def _info(cluster: JobService, descriptor: str):  # type: ignore[no-untyped-def]
    return cluster.lookup([descriptor], include_body=True)[descriptor]


def _past(cluster: JobService, moment_ms: int) -> None:
    """Wait until every shard's clock is past ``moment_ms``: a fixed sleep
    either wastes time or, on a busy machine, ends too early."""
    deadline = time.monotonic() + 10
    while min(cluster.operators.shard_now_ms(s) for s in cluster.operators.shard_ids()) <= moment_ms:
        assert time.monotonic() < deadline, "the shards' clocks did not pass the moment"
        time.sleep(0.05)


def test_enqueue_makes_pending_with_all_attempts(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    shard_now = min(cluster.operators.shard_now_ms(s) for s in cluster.operators.shard_ids())
    descriptor = _one(cluster, queue_name, priority=2, attempts_allowed=4, custom_status="new")
    parsed = JobDescriptor.parse(descriptor)
    assert (parsed.queue, parsed.priority) == (queue_name, 2)
    assert parsed.shard in cluster.operators.shard_ids()
    info = _info(cluster, descriptor)
    assert info.state is JobState.PENDING
    assert (info.attempts_allowed, info.attempts_remaining) == (4, 4)
    assert info.custom_status == "new"
    assert info.body == b"body"
    assert info.claim is None
    # run_after defaults to now on the shard's clock
    assert shard_now - 1000 <= info.run_after_ms <= shard_now + 1000
    assert info.created_at_ms == info.updated_at_ms == info.run_after_ms


def test_default_attempts_come_from_the_retry_policy(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, retry=RetryPolicy.constant(10, retries=3))
    assert _info(cluster, _one(cluster, queue_name)).attempts_allowed == 4


def test_dequeue_claims_with_source(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, attempts_allowed=3)
    [job] = cluster.dequeue(queue_name, 10)
    assert job.descriptor == descriptor
    assert (job.body, job.attempts_allowed, job.attempts_remaining) == (b"body", 3, 3)
    assert job.claim.endswith("@test-worker-a") and len(job.claim.split("@")[0]) == 16
    info = _info(cluster, descriptor)
    assert info.state is JobState.RUNNING
    assert info.claim == "test-worker-a"  # the holder; never the token (tests/contract/test_claims.py)
    assert info.updated_at_ms >= info.created_at_ms
    assert cluster.dequeue(queue_name, 10) == []


def test_future_jobs_wait_for_run_after(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    now = cluster.operators.shard_now_ms()
    later = _one(cluster, queue_name, run_after_ms=now + 3_600_000)
    # Due in 1.5 s: the checks before it must come first even on a busy
    # machine (300 ms was passed there).
    soon = _one(cluster, queue_name, run_after_ms=now + 1500)
    assert cluster.dequeue(queue_name, 10) == []
    assert cluster.count(queue_name, "pending") == 0
    assert cluster.count(queue_name, "pending", future=True) == 2
    _past(cluster, now + 1500)
    assert [j.descriptor for j in cluster.dequeue(queue_name, 10)] == [soon]
    assert _info(cluster, later).state is JobState.PENDING


def test_priorities_are_served_in_order(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, priorities=3)
    by_priority: dict[int, set[str]] = {1: set(), 2: set(), 3: set()}
    for _ in range(4):  # several batches so that sharded setups spread them
        for p in (3, 2, 1):
            by_priority[p].update(cluster.enqueue(queue_name, [Job(b"x", priority=p)] * 5))
    served = [j.descriptor for j in cluster.dequeue(queue_name, 25)]
    assert set(served[:20]) == by_priority[1]
    assert set(served[20:]) <= by_priority[2]
    rest = [j.descriptor for j in cluster.dequeue(queue_name, 100)]
    assert set(rest[:15]) == by_priority[2] - set(served)
    assert set(rest[15:]) == by_priority[3]


def test_ack_success(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, custom_status="a")
    cluster.dequeue(queue_name, 1)
    result = cluster.ack(queue_name, succeeded=[Ack(descriptor, append_custom_status="|done")])
    assert result.acked == [descriptor] and result.stale == []
    info = _info(cluster, descriptor)
    assert info.state is JobState.SUCCEEDED
    assert info.custom_status == "a|done"
    assert info.claim is None


def test_ack_failure_with_retries_left_repends_after_the_delay(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, attempts_allowed=3)
    cluster.dequeue(queue_name, 1)
    # A delay long enough that the checks before it come first on a busy machine.
    result = cluster.ack(queue_name, failed=[Ack(descriptor, "oops", retry_delay_ms=1500)])
    assert result.acked == [descriptor]
    info = _info(cluster, descriptor)
    assert info.state is JobState.PENDING
    assert info.attempts_remaining == 2
    assert info.run_after_ms == info.updated_at_ms + 1500
    assert info.claim is None and info.custom_status == "oops"
    assert cluster.dequeue(queue_name, 1) == []
    _past(cluster, info.run_after_ms)
    [again] = cluster.dequeue(queue_name, 1)
    assert (again.descriptor, again.attempts_remaining) == (descriptor, 2)


def test_ack_failure_at_last_attempt_fails_the_job(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, attempts_allowed=1)
    cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, failed=[Ack(descriptor, retry_delay_ms=10)])
    info = _info(cluster, descriptor)
    assert info.state is JobState.FAILED
    assert info.attempts_remaining == 0


def test_retry_delays_follow_the_queue_policy_exactly(cluster: JobService, queue_name: str) -> None:
    policy = RetryPolicy.custom([100, 200, 300])
    cluster.create_queue(queue_name, retry=policy)
    descriptor = _one(cluster, queue_name)
    assert _info(cluster, descriptor).attempts_allowed == 4
    for retry_number in (1, 2, 3):
        deadline = time.time() + 2
        jobs: list[DequeuedJob] = []
        while not jobs and time.time() < deadline:
            jobs = cluster.dequeue(queue_name, 1)
            time.sleep(0.02)
        assert [j.descriptor for j in jobs] == [descriptor]
        cluster.ack(queue_name, failed=[Ack(descriptor)])
        info = _info(cluster, descriptor)
        assert info.state is JobState.PENDING
        assert info.run_after_ms - info.updated_at_ms == policy.delay_ms(retry_number)
        assert info.attempts_remaining == 4 - retry_number
    time.sleep(0.35)
    cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, failed=[Ack(descriptor)])
    assert _info(cluster, descriptor).state is JobState.FAILED


def test_claim_timeout_repends_then_fails(cluster: JobService, queue_name: str) -> None:
    # A second: on a busy machine the first pass came over 200 ms after the claim.
    cluster.create_queue(queue_name, claim_timeout_ms=1000)
    descriptor = _one(cluster, queue_name, attempts_allowed=2)
    monitor = Monitor(cluster.operators, queues=[queue_name])
    cluster.dequeue(queue_name, 1)
    assert monitor.run_once().claims_repended == 0  # not yet timed out
    time.sleep(1.1)
    stats = monitor.run_once()
    assert (stats.claims_repended, stats.claims_failed) == (1, 0)
    info = _info(cluster, descriptor)
    assert (info.state, info.attempts_remaining, info.claim) == (JobState.PENDING, 1, None)
    assert info.run_after_ms == info.updated_at_ms  # a timeout retries with no delay
    cluster.dequeue(queue_name, 1)
    time.sleep(1.1)
    stats = monitor.run_once()
    assert (stats.claims_repended, stats.claims_failed) == (0, 1)
    info = _info(cluster, descriptor)
    assert (info.state, info.attempts_remaining) == (JobState.FAILED, 0)


def test_a_queue_deleted_during_a_monitor_pass_is_skipped(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone, kept = f"{queue_name}_gone", queue_name
    cluster.create_queue(gone)
    cluster.create_queue(kept, claim_timeout_ms=200)
    configs_read_before_the_delete = cluster.operators.queue_configs([gone, kept])
    _one(cluster, kept)
    cluster.dequeue(kept, 1)
    cluster.delete_queue(gone, "secret")
    time.sleep(0.3)
    monkeypatch.setattr(cluster.operators, "queue_configs", lambda names=None: configs_read_before_the_delete)
    stats = Monitor(cluster.operators, queues=[gone, kept]).run_once()
    assert stats.claims_repended == 1  # the queue after the deleted one was still tended
    for shard in cluster.core.shards.all():
        assert gone not in shard.queue_names()


def test_stale_ack_after_timeout_changes_nothing(
    cluster: JobService, other_worker: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, claim_timeout_ms=200)
    descriptor = _one(cluster, queue_name, attempts_allowed=5)
    cluster.dequeue(queue_name, 1)
    time.sleep(0.3)
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    # Re-pended: the old claimer's ACK is stale.
    result = cluster.ack(queue_name, succeeded=[Ack(descriptor)])
    assert result.stale == [descriptor] and result.acked == []
    assert _info(cluster, descriptor).state is JobState.PENDING
    # Re-claimed by another worker: the old claimer's ACKs and checkpoints are stale...
    [job] = other_worker.dequeue(queue_name, 1)
    before = _info(cluster, descriptor)
    assert cluster.ack(queue_name, failed=[Ack(descriptor, retry_delay_ms=5)]).stale == [descriptor]
    assert cluster.checkpoint(queue_name, [Checkpoint(descriptor, new_body=b"hijack")]).stale == [descriptor]
    after = _info(cluster, descriptor)
    assert after == before
    # ...while the live claimer's work.
    assert other_worker.ack(queue_name, succeeded=[Ack(job.descriptor)]).acked == [descriptor]
    assert _info(cluster, descriptor).state is JobState.SUCCEEDED


def test_checkpoint_heartbeat_keeps_a_long_job_claimed(cluster: JobService, queue_name: str) -> None:
    # Beats at a fifth of the timeout: on a busy machine a 150 ms sleep
    # between beats can last twice that.
    cluster.create_queue(queue_name, claim_timeout_ms=1500)
    descriptor = _one(cluster, queue_name)
    cluster.dequeue(queue_name, 1)
    monitor = Monitor(cluster.operators, queues=[queue_name])
    for _ in range(6):
        time.sleep(0.3)
        assert cluster.checkpoint(queue_name, [Checkpoint(descriptor)]).acked == [descriptor]
        monitor.run_once()
    info = _info(cluster, descriptor)
    assert info.state is JobState.RUNNING
    assert info.attempts_remaining == info.attempts_allowed


def test_checkpoint_changes_body_status_and_attempts(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, attempts_allowed=2, custom_status="tail")
    cluster.dequeue(queue_name, 1)
    cluster.checkpoint(
        queue_name,
        [Checkpoint(descriptor, new_body=b"page-2", attempts_allowed=7, prepend_custom_status="p2;")],
    )
    info = _info(cluster, descriptor)
    assert info.state is JobState.RUNNING
    assert info.body == b"page-2"
    assert (info.attempts_allowed, info.attempts_remaining) == (7, 7)
    assert info.custom_status == "p2;tail"


def test_checkpoint_move_to_pending_spends_no_attempt(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptor = _one(cluster, queue_name, attempts_allowed=3)
    cluster.dequeue(queue_name, 1)
    run_at = cluster.operators.shard_now_ms() + 60_000
    result = cluster.checkpoint(queue_name, [Checkpoint(descriptor, move_to_pending=True, run_after_ms=run_at)])
    assert result.acked == [descriptor]
    info = _info(cluster, descriptor)
    assert (info.state, info.attempts_remaining, info.claim) == (JobState.PENDING, 3, None)
    assert info.run_after_ms == run_at
    # and without a run_after it is runnable at once
    descriptor2 = _one(cluster, queue_name)
    cluster.dequeue(queue_name, 1)
    cluster.checkpoint(queue_name, [Checkpoint(descriptor2, move_to_pending=True)])
    assert [j.descriptor for j in cluster.dequeue(queue_name, 5)] == [descriptor2]


def test_retry_failed_grants_attempts(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptors = cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=1)] * 3)
    for job in cluster.dequeue(queue_name, 3):
        cluster.ack(queue_name, failed=[Ack(job.descriptor)])
    assert cluster.count(queue_name, "failed") == 3
    run_at = cluster.operators.shard_now_ms() + 50
    assert cluster.retry_failed(queue_name, attempts=2, run_after_ms=run_at, limit=2) == 2
    assert cluster.retry_failed(queue_name, attempts=2, run_after_ms=run_at) == 1
    assert cluster.retry_failed(queue_name) == 0
    for d in descriptors:
        info = _info(cluster, d)
        assert (info.state, info.attempts_allowed, info.attempts_remaining) == (JobState.PENDING, 2, 2)
        assert info.run_after_ms == run_at


def test_gc_removes_finished_jobs_past_retention(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    ok, bad, keep = cluster.enqueue(queue_name, [Job(b"a", attempts_allowed=1)] * 3)
    cluster.dequeue(queue_name, 3)
    cluster.ack(queue_name, succeeded=[Ack(ok)], failed=[Ack(bad)])
    monitor = Monitor(cluster.operators, queues=[queue_name])
    stats = monitor.run_once()
    assert (stats.succeeded_collected, stats.failed_collected) == (0, 0)
    cluster.update_queue(queue_name, succeeded_retention_ms=0, failed_retention_ms=0)
    stats = monitor.run_once()
    assert (stats.succeeded_collected, stats.failed_collected) == (1, 1)
    assert set(cluster.lookup([ok, bad, keep])) == {keep}


def test_several_monitors_expire_each_job_once(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, claim_timeout_ms=100)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=3)] * 50)
    cluster.dequeue(queue_name, 50)
    time.sleep(0.2)
    import threading

    totals: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: totals.append(Monitor(cluster.operators, queues=[queue_name]).run_once().claims_repended)
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(totals) == 50
    assert cluster.count(queue_name, "pending") == 50


@pytest.mark.parametrize("limit", [1, 7])
def test_dequeue_carries_acks_along(cluster: JobService, queue_name: str, limit: int) -> None:
    cluster.create_queue(queue_name)
    first = cluster.enqueue(queue_name, [Job(b"1")] * limit)
    cluster.dequeue(queue_name, limit)
    cluster.enqueue(queue_name, [Job(b"2")] * limit)
    jobs = cluster.dequeue(queue_name, limit, succeeded=[Ack(d) for d in first])
    assert len(jobs) == limit
    assert cluster.count(queue_name, "succeeded") == limit
