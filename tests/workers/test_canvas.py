"""Celery's canvas over ``pinlater://``: results kept in the result backend
``workers.app`` configures by default (``PINLATER_RESULT_URL``, the
project's Redis) for the tasks that keep them, so ``AsyncResult.get()``,
groups, chains and chords work, and results expire
(``PINLATER_RESULT_EXPIRES_S``). In-process and through the Thrift server."""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery, chain, chord, group
from celery.exceptions import TaskRevokedError

from pinlater.service import JobService
from pinlater.states import JobState
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers, worker_args
from workers.settings import app_setting

pytestmark = pytest.mark.spread_cases

EXPIRES_S = 3


@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.timeout(150)
def test_chord_chain_group_and_results_that_expire(
    app: Celery, procs: Processes, results: redis.Redis[bytes]
) -> None:
    procs.start("canvas", worker_args("canvas", [qname("w_add"), qname("w_tsum"), qname("w_pub")], 4),
                extra_env={"PINLATER_RESULT_EXPIRES_S": str(EXPIRES_S)})
    wait_for_workers(app, ["canvas"])
    add, tsum = app.tasks["tests.w_add"], app.tasks["tests.w_tsum"]

    assert add.delay(2, 3).get(timeout=30) == 5
    # By name, without the task: its result is kept when the caller asks.
    assert app.send_task("tests.w_add", args=[5, 6], ignore_result=False).get(timeout=30) == 11
    assert chain(add.s(1, 1), add.s(2), add.s(3))().get(timeout=30) == 7
    assert group(add.s(i, 1) for i in range(10))().get(timeout=30) == list(range(1, 11))
    joined = chord(group(add.s(i, i) for i in range(100)), tsum.s())()
    assert joined.get(timeout=90) == 9900

    # Kept for PINLATER_RESULT_EXPIRES_S (the workers' setting), then gone.
    backend = redis.Redis.from_url(app_setting("PINLATER_RESULT_URL"))
    meta = f"celery-task-meta-{joined.id}"
    assert 0 < backend.ttl(meta) <= EXPIRES_S
    wait_until(lambda: not backend.exists(meta), EXPIRES_S + 5, what="the chord's result to expire")

    # A task that ignores its result (the default) stores none.
    ignored = app.tasks["tests.w_pub"].delay()
    wait_until(lambda: results.hlen(key("runs:w_pub")) == 1, 30, what="the task that ignores its result")
    assert app.tasks["tests.w_pub"].ignore_result and not add.ignore_result
    assert not backend.exists(f"celery-task-meta-{ignored.id}")
    backend.close()


@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_task_whose_message_expired_undelivered_is_revoked_in_its_result(
    app: Celery, procs: Processes, service: JobService, results: redis.Redis[bytes]
) -> None:
    """Its job ends FAILED, never run; its result says REVOKED (reason
    "expired"), as Celery's own worker stores it, if the task or the
    publish keeps results: ``get()`` raises instead of waiting for ever."""
    add, pub = app.tasks["tests.w_add"], app.tasks["tests.w_pub"]
    kept = add.apply_async((1, 2), expires=1)
    asked = app.send_task("tests.w_pub", ignore_result=False, expires=1)
    ignored = pub.apply_async(expires=1)
    time.sleep(1.5)
    procs.start("expired", worker_args("expired", [qname("w_add"), qname("w_pub")], 2))
    wait_for_workers(app, ["expired"])
    for result in (kept, asked):
        with pytest.raises(TaskRevokedError, match="expired"):
            result.get(timeout=30)
    wait_until(lambda: service.lookup([ignored.descriptor])[ignored.descriptor].state is JobState.FAILED, 30,
               what="the ignored task's job to end")
    for result in (kept, ignored):
        info = service.lookup([result.descriptor])[result.descriptor]
        assert info.state is JobState.FAILED and info.custom_status.startswith("expired: not delivered"), info
    assert results.hlen(key("runs:w_pub")) == 0  # none ran
    backend = redis.Redis.from_url(app_setting("PINLATER_RESULT_URL"))
    assert not backend.exists(f"celery-task-meta-{ignored.id}")
    backend.close()


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
@pytest.mark.timeout(120)
def test_an_attempt_the_job_service_will_retry_is_no_ending_for_results_errbacks_or_chords(
    app: Celery, procs: Processes, results: redis.Redis[bytes]
) -> None:
    procs.start("retries", worker_args("retries", [qname(q) for q in ("w_add", "w_tsum", "w_add_once", "w_never",
                                                                      "w_errback", "w_exit_once")], 4))
    wait_for_workers(app, ["retries"])
    add, tsum, add_once = app.tasks["tests.w_add"], app.tasks["tests.w_tsum"], app.tasks["tests.w_add_once"]
    errback = app.tasks["tests.w_errback"]

    # Its first attempt fails and the job runs again: the result is the second's.
    assert add_once.apply_async((1, 2), link_error=errback.s()).get(timeout=30) == 3
    assert chord([add_once.s(3, 4), add.s(5, 6)], tsum.s())().get(timeout=30) == 18
    # Its first attempt's pool process dies (a lost worker): a retry too.
    assert chord([app.tasks["tests.w_exit_once"].s(7), add.s(1, 1)], tsum.s())().get(timeout=30) == 9
    # Every attempt fails: one FAILURE, and the errback runs once, after the last.
    failing = app.tasks["tests.w_never"].apply_async(link_error=errback.s())
    with pytest.raises(ValueError, match="every attempt fails"):
        failing.get(timeout=30)
    assert int(results.get(key("runs:w_never")) or 0) == 3
    wait_until(lambda: results.llen(key("runs:w_errback")) >= 1, 30, what="the errback")
    time.sleep(1.0)  # a second errback would have been published by now
    assert [r.decode() for r in results.lrange(key("runs:w_errback"), 0, -1)] == [failing.id]
