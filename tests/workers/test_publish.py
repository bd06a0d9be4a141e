"""Publishing makes PinLater jobs; delayed jobs stay on the shard, never in
a worker; raw jobs from non-Celery clients run as their queue's task; a
warm shutdown gives unstarted prefetched jobs back without spending an
attempt; remote control works over the bus."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
import redis
from celery import Celery

from pinlater import Job, JobState
from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers

BOTH = pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
REDIS_AND_THRIFT = pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)


@BOTH
@pytest.mark.timeout(90)
def test_publish_creates_jobs_and_workers_never_hold_future_ones(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    pub = app.tasks["tests.w_pub"]
    before = time.time() * 1000
    now_result = pub.delay(1)
    later_result = pub.apply_async((2,), countdown=3600, priority=2)
    after = time.time() * 1000

    jobs = service.lookup([now_result.descriptor, later_result.descriptor])
    now_job, later_job = jobs[now_result.descriptor], jobs[later_result.descriptor]
    assert now_result.descriptor.startswith(qname("w_pub") + ":") and ":p1:" in now_result.descriptor
    assert later_result.descriptor.startswith(qname("w_pub") + ":") and ":p2:" in later_result.descriptor
    assert before - 1000 <= now_job.run_after_ms <= after + 1000
    assert abs(later_job.run_after_ms - (before + 3_600_000)) < 5_000
    assert later_job.state == JobState.PENDING

    procs.worker("pub", [qname("w_pub")], 2)
    wait_for_workers(app, ["pub"])
    wait_until(lambda: service.lookup([now_result.descriptor])[now_result.descriptor].state == JobState.SUCCEEDED,
               20, what="the immediate job to succeed")

    inspect = app.control.inspect(timeout=1.0)
    reserved, scheduled = inspect.reserved() or {}, inspect.scheduled() or {}
    assert reserved and scheduled, "no inspect replies: remote control does not work"
    held = [t for replies in (reserved, scheduled) for tasks in replies.values() for t in tasks]
    assert held == [], f"a worker holds jobs it should not: {held}"
    assert service.lookup([later_result.descriptor])[later_result.descriptor].state == JobState.PENDING
    assert results.hget(key("runs:w_pub"), now_result.descriptor) == b"1"
    assert not results.hexists(key("runs:w_pub"), later_result.descriptor)


@BOTH
@pytest.mark.timeout(60)
def test_raw_body_from_a_non_celery_client_runs_as_the_queue_task(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    app.tasks["tests.w_raw"]  # the queue is created with its task's config
    service.create_queue(qname("w_raw"))
    bodies = [b'{"user": 42}', bytes(range(256))]
    service.enqueue(qname("w_raw"), [Job(b) for b in bodies])
    procs.worker("raw", [qname("w_raw")], 1)
    wait_until(lambda: results.llen(key("raw:w_raw")) == 2, 30, what="raw jobs to run")
    assert sorted(results.lrange(key("raw:w_raw"), 0, -1)) == sorted(bodies)
    # ACKs are flushed in batches, a moment after the tasks return.
    wait_until(lambda: service.count(qname("w_raw"), JobState.SUCCEEDED) == 2, 10, what="both ACKs")


@REDIS_AND_THRIFT
@pytest.mark.timeout(60)
def test_the_readme_task_options_configure_the_queue(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    """``@app.task(pinlater_queue=..., max_dequeue_rate=200)``: the first
    publish creates the queue with that rate, in-process or over Thrift."""
    queue = qname("w_readme")
    service.delete_queue(queue, "secret")  # made again by this test's publish, whatever ran before
    result = app.tasks["tests.w_readme"].apply_async((42,), priority=1)
    config = service.queue_config(queue, fresh=True)
    assert config.max_dequeue_rate == 200
    assert result.descriptor.startswith(queue + ":")
    procs.worker("readme", [queue], 1)
    wait_until(lambda: service.lookup([result.descriptor])[result.descriptor].state == JobState.SUCCEEDED,
               30, what="the README task to run")
    assert results.lrange(key("sent:w_readme"), 0, -1) == [b"42"]


@REDIS_AND_THRIFT
@pytest.mark.timeout(60)
def test_warm_shutdown_releases_unstarted_prefetched_jobs_without_spending_attempts(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    slow = app.tasks["tests.w_slow"]
    descriptors = [slow.delay(2.0).descriptor for _ in range(5)]
    procs.worker("slow", [qname("w_slow")], 1, "--prefetch-multiplier", "4")
    wait_until(lambda: results.llen(key("started:w_slow")) >= 1, 30, what="the first slow task to start")
    # One running, up to three prefetched; SIGTERM is Celery's warm shutdown.
    time.sleep(0.3)
    assert procs.stop("slow", signal.SIGTERM, timeout=30) == 0
    jobs = service.lookup(descriptors)
    states = [jobs[d].state for d in descriptors]
    assert states.count(JobState.SUCCEEDED) == results.llen(key("started:w_slow")) >= 1
    assert JobState.RUNNING not in states, f"claims left behind: {states}"
    pending = [jobs[d] for d in descriptors if jobs[d].state == JobState.PENDING]
    assert pending, "nothing was left to give back"
    assert all(j.attempts_remaining == j.attempts_allowed for j in pending), "a release spent an attempt"
    assert "Restoring" not in procs.log("slow")


@REDIS_AND_THRIFT
@pytest.mark.timeout(60)
def test_a_publish_with_an_idempotency_key_makes_one_job(app: Celery, service: JobService) -> None:
    pub = app.tasks["tests.w_pub"]
    key = uuid.uuid4().hex  # keys outlive a test's queues (the window is 10 minutes)
    first = pub.apply_async((7,), idempotency_key=f"{key}-3")
    again = pub.apply_async((7,), idempotency_key=f"{key}-3")
    other = pub.apply_async((7,), idempotency_key=f"{key}-4")
    assert again.descriptor == first.descriptor != other.descriptor
    assert service.count(qname("w_pub"), "pending") == 2
