"""Out-of-range input is refused with the service's own error, the same way
on every backend setup, and refusing it stores or changes nothing."""

from __future__ import annotations

import json
import math

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import ContinuationInvalid, DequeueRateLimited, EnqueueRejected, InvalidRequest
from pinlater.limits import MAX_DELAY_MS, MAX_TIMESTAMP_MS, MIN_DEQUEUE_RATE
from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy

# Java's Long.MAX_VALUE ("never"), values past i64, and the first integer a
# double cannot hold: each used to be stored wrong or to raise a driver error.
FAR_FUTURE_REFUSED = [MAX_TIMESTAMP_MS + 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -1]
NOT_A_TIMESTAMP = [1.5, math.nan, math.inf, True, "1000"]


def _total(cluster: JobService, queue: str) -> int:
    return sum(cluster.count(queue, state) for state in JobState) + cluster.count(queue, "pending", future=True)


def test_the_largest_run_after_is_stored_exactly_and_stays_scheduled(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    [descriptor] = cluster.enqueue(queue_name, [Job(b"never", run_after_ms=MAX_TIMESTAMP_MS)])
    assert cluster.lookup([descriptor])[descriptor].run_after_ms == MAX_TIMESTAMP_MS
    assert cluster.dequeue(queue_name, 10) == []
    assert cluster.count(queue_name, "pending", future=True) == 1
    assert cluster.count(queue_name, "pending") == 0


@pytest.mark.parametrize("run_after", FAR_FUTURE_REFUSED + NOT_A_TIMESTAMP)
def test_run_after_out_of_range_is_refused_and_nothing_is_stored(
    cluster: JobService, queue_name: str, run_after: object
) -> None:
    cluster.create_queue(queue_name)
    batch = [Job(b"ok"), Job(b"bad", run_after_ms=run_after)]  # type: ignore[arg-type]
    with pytest.raises(EnqueueRejected, match="run_after must be milliseconds since the epoch from 0 to"):
        cluster.enqueue(queue_name, batch)
    assert _total(cluster, queue_name) == 0
    assert cluster.dequeue(queue_name, 10) == []


def test_times_and_delays_of_running_jobs_are_checked_before_anything_changes(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"a", attempts_allowed=3), Job(b"b", attempts_allowed=3)])
    first, second = cluster.dequeue(queue_name, 2)
    for delay in (2**63, 2**63 - 1, MAX_DELAY_MS + 1, -1):
        with pytest.raises(InvalidRequest, match="retry delay must be 0 to"):
            # One good ACK first: a bad one anywhere in the call refuses the whole call.
            cluster.ack(queue_name, succeeded=[Ack(second.descriptor)],
                        failed=[Ack(first.descriptor, retry_delay_ms=delay)])
    for run_after in (2**63, MAX_TIMESTAMP_MS + 1, -5):
        with pytest.raises(InvalidRequest, match="run_after"):
            cluster.checkpoint(queue_name, [Checkpoint(first.descriptor, move_to_pending=True, run_after_ms=run_after)])
    infos = cluster.lookup([first.descriptor, second.descriptor])
    assert {i.state for i in infos.values()} == {JobState.RUNNING}
    assert {i.attempts_remaining for i in infos.values()} == {3}

    # The largest delay is accepted and lands exactly: now + delay.
    now = min(cluster.operators.shard_now_ms(s) for s in cluster.operators.shard_ids())
    result = cluster.ack(queue_name, failed=[Ack(first.descriptor, retry_delay_ms=MAX_DELAY_MS)])
    assert result.acked == [first.descriptor]
    info = cluster.lookup([first.descriptor])[first.descriptor]
    assert info.state is JobState.PENDING
    assert now + MAX_DELAY_MS - 1000 <= info.run_after_ms <= now + MAX_DELAY_MS + 5000


def test_retry_failed_refuses_a_run_after_out_of_range(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    [descriptor] = cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=1)])
    cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, failed=[Ack(descriptor)])
    with pytest.raises(InvalidRequest, match="run_after"):
        cluster.retry_failed(queue_name, run_after_ms=2**63)
    assert cluster.count(queue_name, "failed") == 1
    assert cluster.retry_failed(queue_name, run_after_ms=MAX_TIMESTAMP_MS) == 1
    assert cluster.lookup([descriptor])[descriptor].run_after_ms == MAX_TIMESTAMP_MS


def test_jobs_per_call_are_capped(cluster: JobService, queue_name: str) -> None:
    cap = cluster.settings.max_jobs_per_call
    cluster.create_queue(queue_name)
    with pytest.raises(EnqueueRejected, match=f"{cap + 1} jobs in one call; the limit is {cap}"):
        cluster.enqueue(queue_name, [Job(b"x")] * (cap + 1))
    assert _total(cluster, queue_name) == 0
    assert len(cluster.enqueue(queue_name, [Job(b"x")] * cap)) == cap
    jobs = cluster.dequeue(queue_name, cap)
    too_many = [Ack(j.descriptor) for j in jobs] + [Ack(jobs[0].descriptor)]
    with pytest.raises(InvalidRequest, match="ACKs in one call"):
        cluster.ack(queue_name, succeeded=too_many)
    with pytest.raises(InvalidRequest, match="10001 descriptors in one call; the limit is 10000"):
        cluster.lookup([jobs[0].descriptor] * 10_001)
    assert cluster.count(queue_name, "running") == cap


@pytest.mark.parametrize("rate", [math.nan, math.inf, -math.inf, -1.0, 1e309, 2e9, 5e-324, 1e-300, 9e-7])
def test_non_finite_negative_and_absurd_rates_are_refused(
    cluster: JobService, queue_name: str, rate: float
) -> None:
    with pytest.raises(InvalidRequest, match="max_dequeue_rate must be a finite number"):
        cluster.create_queue(queue_name, max_dequeue_rate=rate)
    assert queue_name not in cluster.queue_names()
    cluster.create_queue(queue_name, max_dequeue_rate=50)
    with pytest.raises(InvalidRequest, match="max_dequeue_rate must be a finite number"):
        cluster.set_rate(queue_name, rate)
    assert cluster.queue_config(queue_name, fresh=True).max_dequeue_rate == 50


def test_the_slowest_rate_limits_dequeues_with_a_wait_a_client_can_read(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, max_dequeue_rate=-0.0)
    assert str(cluster.queue_config(queue_name, fresh=True).max_dequeue_rate) == "0.0"
    cluster.set_rate(queue_name, MIN_DEQUEUE_RATE)
    cluster.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    assert len(cluster.dequeue(queue_name, 2)) == 1  # the bucket's one token
    with pytest.raises(DequeueRateLimited) as limited:
        cluster.dequeue(queue_name, 1)
    assert limited.value.retry_after_ms == 1_000_000_000
    with pytest.raises(InvalidRequest, match="key_rate must be a finite number"):
        cluster.update_queue(queue_name, key_rate=MIN_DEQUEUE_RATE / 2)


def test_a_stored_rate_below_the_floor_is_read_as_the_floor() -> None:
    stored = json.dumps({"name": "q", "max_dequeue_rate": 5e-324, "key_rate": 1e-300})
    config = QueueConfig.from_json(stored)
    assert (config.max_dequeue_rate, config.key_rate) == (MIN_DEQUEUE_RATE, MIN_DEQUEUE_RATE)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priorities": 0}, "priorities must be a whole number from 1 to 100"),
        ({"priorities": 101}, "priorities must be a whole number from 1 to 100"),
        ({"claim_timeout_ms": 2**63}, "claim_timeout_ms must be from 100 to"),
        ({"succeeded_retention_ms": -1}, "succeeded_retention_ms must be from 0 to"),
    ],
)
def test_queue_options_out_of_range_are_refused_not_replaced(
    cluster: JobService, queue_name: str, options: dict[str, int], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        cluster.create_queue(queue_name, **options)  # type: ignore[arg-type]
    assert queue_name not in cluster.queue_names()


@pytest.mark.parametrize(
    "policy",
    [
        {"kind": "exponential", "factor": math.nan},
        {"kind": "exponential", "factor": 1e308},
        {"kind": "constant", "base_ms": 2**63},
        {"kind": "linear", "retries": 10**6},
    ],
)
def test_retry_policies_out_of_range_are_refused(policy: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**policy)  # type: ignore[arg-type]


def test_backoff_never_overflows() -> None:
    steep = RetryPolicy.exponential(1000, retries=999, factor=100, max_delay_ms=MAX_DELAY_MS)
    assert steep.delay_ms(999) == MAX_DELAY_MS
    assert RetryPolicy().delay_ms(10**9) == RetryPolicy().max_delay_ms



@pytest.mark.parametrize(
    "continuation",
    ["9" * 30 + ":r1:1:5", "-5:r1:1:5", "5:r1:0:5", "5:r1:1:" + "9" * 25, "5:r1:1", "1" * 5000, "5:r-1:1:5"],
)
def test_forged_continuations_are_refused(cluster: JobService, queue_name: str, continuation: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x")])
    with pytest.raises(ContinuationInvalid, match="malformed scan continuation"):
        cluster.scan(queue_name, "pending", continuation=continuation)
