"""Cancel under Celery workers: a cancelled pending job never runs; a
running task observes its cancel within one heartbeat interval
(``raise_if_cancelled``) and the job ends FAILED ``[cancelled]``, never
retried; a job the worker holds unstarted when it is cancelled is skipped;
``revoke(terminate=True)`` stops a running task by force, with the same
end; ``workers.cancel.cancel`` stores REVOKED for the pending tasks it
cancels that keep results. In-process and through the Thrift server."""

from __future__ import annotations

import socket
import time

import pytest
import redis
from celery import Celery
from celery.exceptions import TaskRevokedError

from pinlater import CANCELLED_STATUS, JobState
from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers
from workers.cancel import cancel

pytestmark = pytest.mark.spread_cases

# The queue's claim timeout is 3 s: a running task is heartbeated each second.
HEARTBEAT_S = 1.0


def _ended_cancelled(service: JobService, descriptor: str) -> bool:
    info = service.lookup([descriptor]).get(descriptor)
    return info is not None and info.state is JobState.FAILED and info.custom_status.endswith(CANCELLED_STATUS)


@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_cancel_pending_and_running_and_revoke_with_terminate(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    task = app.tasks["tests.w_cancel"]
    queue = qname("w_cancel")
    # Pending, no worker yet: cancelled, it never runs.
    never = task.delay(60).descriptor
    assert service.cancel(queue, [never]).cancelled == [never]

    procs.worker("cancelw", [queue], 2)
    wait_for_workers(app, ["cancelw"])
    started = key("started:w_cancel")

    # Running: cancelled, the task observes it within a heartbeat interval.
    running = task.delay(60).descriptor
    wait_until(lambda: results.lrange(started, 0, -1) == [running.encode()], 30, what="the task to start")
    time.sleep(HEARTBEAT_S * 1.5)  # past its first heartbeat: the thread beats it from now on
    cancelled_at = time.monotonic()
    assert service.cancel(queue, [running]).interrupted == [running]
    observed = wait_until(lambda: results.lrange(key("observed:w_cancel"), 0, -1), 30, what="the task to observe it")
    descriptor, at = observed[0].decode().split()
    assert descriptor == running
    assert float(at) - cancelled_at <= HEARTBEAT_S + 1.0, float(at) - cancelled_at
    assert _ended_cancelled(service, running)

    # revoke(terminate=True): killed, the job ends cancelled too.
    result = task.delay(60)
    wait_until(lambda: len(results.lrange(started, 0, -1)) == 2, 30, what="the third task to start")
    app.control.revoke(result.id, terminate=True, destination=[f"cancelw@{socket.gethostname()}"])
    wait_until(lambda: _ended_cancelled(service, result.descriptor), 30,
               what=lambda: f"the revoked job to end cancelled: {service.lookup([result.descriptor])}")

    # None ran again or was retried.
    time.sleep(HEARTBEAT_S * 2)
    assert service.count(queue, "pending") == 0 and service.count(queue, "running") == 0
    assert results.lrange(started, 0, -1) == [running.encode(), result.descriptor.encode()]
    assert _ended_cancelled(service, never)


@pytest.mark.timeout(120)
def test_a_held_job_cancelled_before_it_starts_is_skipped(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    task = app.tasks["tests.w_cancel"]
    queue = qname("w_cancel")
    procs.worker("heldw", [queue], 1)  # one pool process: the second job waits, held by the worker
    wait_for_workers(app, ["heldw"])
    started = key("started:w_cancel")
    first = task.delay(60).descriptor
    wait_until(lambda: results.lrange(started, 0, -1) == [first.encode()], 30, what="the first task to start")
    held = task.delay(60).descriptor
    wait_until(lambda: service.count(queue, "running") == 2, 30, what="the worker to hold the second job")
    assert service.cancel(queue, [held]).interrupted == [held]  # RUNNING to the job service: claimed
    time.sleep(HEARTBEAT_S * 2.5)  # the worker's heartbeat of its held jobs hears of it
    assert service.cancel(queue, [first]).interrupted == [first]
    wait_until(lambda: results.llen(key("observed:w_cancel")) == 1, 30, what="the first task to observe it")
    time.sleep(HEARTBEAT_S * 2)  # the pool is free: the held job would start now
    assert results.lrange(started, 0, -1) == [first.encode()]
    assert _ended_cancelled(service, held) and _ended_cancelled(service, first)
    assert "Discarding cancelled task" in procs.log("heldw")



@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.timeout(60)
def test_cancelling_pending_tasks_stores_revoked_for_those_that_keep_results(app: Celery, service: JobService) -> None:
    # No worker consumes these queues: both jobs stay PENDING until cancelled.
    kept = app.tasks["tests.w_add"].delay(2, 3)
    ignored = app.tasks["tests.w_cancel"].delay(60)
    outcome = cancel([kept, ignored.descriptor])
    assert sorted(outcome.cancelled) == sorted([kept.descriptor, ignored.descriptor])
    assert outcome.interrupted == outcome.finished == outcome.unknown == [] and outcome.unapplied == {}
    with pytest.raises(TaskRevokedError):
        kept.get(timeout=10)
    assert kept.state == "REVOKED"
    assert ignored.state == "PENDING"  # its task keeps no results: nothing stored
    assert _ended_cancelled(service, kept.descriptor) and _ended_cancelled(service, ignored.descriptor)
    # Sent again: the jobs had ended, nothing changes.
    again = cancel([kept, ignored], app=app)
    assert sorted(again.finished) == sorted([kept.descriptor, ignored.descriptor]) and again.cancelled == []
    with pytest.raises(TypeError, match="results of PinLater publishes"):
        cancel([object()], app=app)
