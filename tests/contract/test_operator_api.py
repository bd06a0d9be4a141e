"""The service's methods for operators' tools (dashboard, monitor, CLI,
demos): shard status, queue configs, per-shard counts, the oldest pending
job, the shard clock, event counts and the monitor's two steps, on every
setup."""

from __future__ import annotations

import logging
import time

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.errors import InvalidRequest, QueueNameInvalid, QueueNotFound
from pinlater.operators import Monitor
from tests.support.stores import ALL_SETUPS, settings_for


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


def test_a_queue_whose_config_the_control_store_lost_is_found_and_restored_with_all_its_jobs(
    cluster: JobService, other_worker: JobService, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    ops = cluster.operators
    cluster.create_queue(queue_name, priorities=4, max_dequeue_rate=5.0)
    # One call a job, so that a sharded setup holds them on both shards.
    bodies = {b"low%d" % i: 4 for i in range(6)} | {b"high%d" % i: 1 for i in range(6)}
    for body, priority in bodies.items():
        cluster.enqueue(queue_name, [Job(body, priority=priority)])
    assert other_worker.queue_config(queue_name).priorities == 4  # cached there
    # The control store comes back without its data; the shards keep theirs.
    cluster.core.control.delete_queue(queue_name)
    cluster.core.configs.forget(queue_name)

    with pytest.raises(QueueNotFound, match="does not exist"):
        cluster.enqueue(queue_name, [Job(b"new")])
    # A process that knew the queue says what may have happened.
    with pytest.raises(QueueNotFound, match=r"no longer in the control store.*lost its data.*restore-queues"):
        other_worker.queue_config(queue_name, fresh=True)
    found = ops.unregistered_queues()[queue_name]
    assert found.priorities == 4 and set(found.shards) == set(ops.shard_ids())

    # The monitor says so from its second pass on, and tends nothing of it meanwhile.
    monitor = Monitor(ops, queues=[queue_name])
    with caplog.at_level(logging.ERROR, logger="pinlater.operators"):
        assert monitor.run_once().unregistered_queues == [queue_name]
        assert not [r for r in caplog.records if queue_name in r.getMessage()]
        assert monitor.run_once().as_dict()["unregistered_queues"] == [queue_name]
    [said] = [r.getMessage() for r in caplog.records if queue_name in r.getMessage()]
    assert "lost its data" in said and f"pinlater restore-queues {queue_name}" in said

    with pytest.raises(InvalidRequest, match="not unregistered"):
        ops.restore_queues([queue_name, queue_name + "_none"], paused=True)
    restored = ops.restore_queues([queue_name], paused=True)[queue_name]
    # Default settings but paused, and every priority its jobs are at.
    assert (restored.priorities, restored.paused, restored.max_dequeue_rate) == (4, True, None)
    assert queue_name not in ops.unregistered_queues()
    assert Monitor(ops, queues=[queue_name]).run_once().unregistered_queues == []
    with pytest.raises(InvalidRequest, match="not unregistered"):
        ops.restore_queues([queue_name], paused=False)
    assert cluster.count(queue_name, "pending") == len(bodies)
    cluster.resume(queue_name)
    got: list[bytes] = []
    for _ in range(10):
        jobs = other_worker.dequeue(queue_name, 20)
        got += [j.body for j in jobs]
        other_worker.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs])
        if len(got) >= len(bodies):
            break
    assert sorted(got) == sorted(bodies)


def test_each_shard_reaches_a_store_of_its_own_that_keeps_its_id(cluster: JobService, setup: str) -> None:
    ids = {b.shard_id: b.store_id() for b in cluster.core.shards.all()}
    assert all(ids.values()) and len(set(ids.values())) == len(ids)
    assert {b.shard_id: b.store_id() for b in cluster.core.shards.all()} == ids
    if ALL_SETUPS[setup].servers:  # what another process finds in the same stores
        with JobService.from_settings(settings_for(setup), source="another") as again:
            assert {b.shard_id: b.store_id() for b in again.core.shards.all()} == ids
