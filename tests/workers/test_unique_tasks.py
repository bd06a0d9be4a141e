"""Unique jobs under Celery: a task with ``unique = True`` (keyed by its
arguments) or ``unique_of`` (keyed by a function of them) makes no second
job while one with its key is pending; the publish's result names the
holder (``descriptor``, ``duplicate``); once the job has run, the next
publish makes a job again. In process and through the Thrift server."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers

pytestmark = pytest.mark.spread_cases


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_unique_task_is_queued_once_while_pending(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    by_args, by_fn = app.tasks["tests.w_unique"], app.tasks["tests.w_unique_of"]
    first = by_args.delay(42)
    again = by_args.delay(42)
    other = by_args.delay(7)
    assert (first.duplicate, again.duplicate, other.duplicate) == (False, True, False)
    assert again.descriptor == first.descriptor != other.descriptor
    named = by_fn.delay(42, "first")
    assert by_fn.delay(42, "second").duplicate  # same account: same key
    assert by_fn.apply_async((42, "third"), unique_key="account:43").duplicate is False  # the option wins
    assert service.count(qname("w_unique"), "pending") == 2
    assert service.count(qname("w_unique_of"), "pending") == 2

    procs.worker("uniq1", [qname("w_unique"), qname("w_unique_of")], 1)
    wait_for_workers(app, ["uniq1"])
    wait_until(lambda: results.llen(key("runs:w_unique")) >= 2 and results.llen(key("runs:w_unique_of")) >= 2,
               60, what="the unique tasks", interval=0.2)
    assert sorted(int(r) for r in results.lrange(key("runs:w_unique"), 0, -1)) == [7, 42]
    assert sorted(r.decode() for r in results.lrange(key("runs:w_unique_of"), 0, -1)) == ["42:first", "42:third"]
    wait_until(lambda: service.count(qname("w_unique"), "running") == 0, 30, what="the runs to end")
    later = by_args.delay(42)
    assert later.duplicate is False and later.descriptor != first.descriptor
    assert service.lookup([named.descriptor])[named.descriptor].state.name == "SUCCEEDED"
