"""The service's methods for operators' tools (dashboard, monitor, CLI,
demos): shard status, queue configs, per-shard counts, the oldest pending
job, the shard clock, event counts and the monitor's two steps, on every
setup."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.errors import InvalidRequest, QueueNameInvalid


def test_shard_ids_and_status(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    ids = cluster.operators.shard_ids()
    assert ids and list(cluster.operators.shard_status()) == ids
    before = time.time()
    status = cluster.operators.shard_status(probe=True)
    assert all(h.healthy and h.consecutive_errors == 0 and h.last_probe_at >= before for h in status.values())
    descriptors = cluster.enqueue(queue_name, [Job(b"x")] * 10)
    assert {JobDescriptor.parse(d).shard for d in descriptors} <= set(ids)


def test_counts_on_each_shard_add_up_and_the_oldest_pending_job_is_found(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name, priorities=2)
    now = cluster.operators.shard_now_ms()
    assert abs(now - time.time() * 1000) < 60_000
    # One call per job: each picks a shard at random, so sharded setups use both.
    oldest_by_shard: dict[str, tuple[int, str]] = {}
    for age_s in range(1, 21):
        run_after = now - age_s * 1000
        [d] = cluster.enqueue(queue_name, [Job(b"old", priority=2, run_after_ms=run_after)])
        shard = JobDescriptor.parse(d).shard
        oldest_by_shard[shard] = min(oldest_by_shard.get(shard, (run_after, d)), (run_after, d))
    cluster.enqueue(queue_name, [Job(b"later", priority=2, run_after_ms=now + 3_600_000)])
    for shard in cluster.operators.shard_ids():
        assert cluster.operators.oldest_pending(shard, queue_name, 1) is None
        found = cluster.operators.oldest_pending(shard, queue_name, 2)
        if shard not in oldest_by_shard:
            assert found is None
            continue
        assert found is not None and found.body is None
        assert (found.run_after_ms, found.descriptor) == oldest_by_shard[shard]
        assert found.state is JobState.PENDING
    ops = cluster.operators
    pending_now = sum(ops.count_on_shard(s, queue_name, 2, JobState.PENDING) for s in ops.shard_ids())
    pending_later = sum(ops.count_on_shard(s, queue_name, 2, "pending", True) for s in ops.shard_ids())
    assert (pending_now, pending_later) == (20, 1)
    assert pending_now == cluster.count(queue_name, "pending")


def test_per_shard_reads_refuse_bad_input_without_blaming_the_shard(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    shard = cluster.operators.shard_ids()[0]
    with pytest.raises(InvalidRequest, match="no shard 'nope'"):
        cluster.operators.count_on_shard("nope", queue_name, 1, JobState.PENDING)
    with pytest.raises(InvalidRequest, match="no shard 'nope'"):
        cluster.operators.shard_now_ms("nope")
    with pytest.raises(InvalidRequest, match="priority"):
        cluster.operators.count_on_shard(shard, queue_name, 0, JobState.PENDING)
    with pytest.raises(InvalidRequest, match="priority"):
        cluster.operators.oldest_pending(shard, queue_name, 101)
    with pytest.raises(QueueNameInvalid):
        cluster.operators.oldest_pending(shard, "no spaces", 1)
    with pytest.raises(ValueError, match="unknown job state"):  # as count() says it
        cluster.operators.count_on_shard(shard, queue_name, 1, "sleeping")
    assert cluster.operators.shard_status()[shard].consecutive_errors == 0


def test_queue_configs_lists_every_queue(cluster: JobService, queue_name: str) -> None:
    created = cluster.create_queue(queue_name, priorities=4, claim_timeout_ms=1234)
    assert cluster.operators.queue_configs()[queue_name] == created
    assert cluster.operators.queue_configs([queue_name, queue_name + "_none"]) == {queue_name: created}
    assert queue_name in cluster.operators.queue_config_texts()
    cluster.delete_queue(queue_name, "secret")
    assert queue_name not in cluster.operators.queue_configs()


def test_the_monitor_steps_expire_claims_and_collect_finished_jobs(cluster: JobService, queue_name: str) -> None:
    config = cluster.create_queue(queue_name, claim_timeout_ms=100, succeeded_retention_ms=0)
    cluster.enqueue(queue_name, [Job(b"x")] * 6)
    jobs = cluster.dequeue(queue_name, 6)
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs[:2]])
    time.sleep(0.3)  # past the claim timeout of the four still running
    repended = sum(cluster.operators.expire_claims(s, config, 1, 1000).repended for s in cluster.operators.shard_ids())
    assert repended == 4 and cluster.count(queue_name, "pending") == 4
    ops = cluster.operators
    collected = sum(ops.collect_finished(s, config, 1, JobState.SUCCEEDED, 1000) for s in ops.shard_ids())
    assert collected == 2 and cluster.count(queue_name, "succeeded") == 0
    with pytest.raises(InvalidRequest, match="only finished jobs"):
        cluster.operators.collect_finished(cluster.operators.shard_ids()[0], config, 1, JobState.PENDING, 1000)
    cluster.operators.flush_counters()
    assert cluster.operators.recent_totals(2)[queue_name]["claims_expired"] == 4


def test_event_counts_and_minute_series(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x")] * 3)
    cluster.operators.flush_counters()
    assert cluster.operators.recent_totals(2)[queue_name]["enqueued"] == 3
    assert cluster.operators.recent_rates(1)[queue_name]["enqueued"] > 0
    series = cluster.operators.minute_series([queue_name], minutes=2)[queue_name]
    assert len(series["enqueued"]) == 2 and sum(series["enqueued"]) == 3
