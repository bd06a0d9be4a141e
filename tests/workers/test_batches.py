"""Batches under Celery (``workers.batches``): a group of tasks published
as one batch, some failing, and a callback that runs once, after every one
of them, with the batch's counts. In process and through the Thrift server."""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers
from workers.batches import publish_batch

pytestmark = pytest.mark.spread_cases

JOBS = 30
FAILING = {3, 11, 17}


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_batch_s_callback_runs_once_after_all_its_tasks(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    member, done = app.tasks["tests.w_batch_member"], app.tasks["tests.w_batch_done"]
    published = publish_batch([member.s(n, n in FAILING) for n in range(JOBS)], done.s("nightly"),
                              description="test batch")
    status = service.batch_status(published.batch)
    assert (status.state, status.total, status.description) == ("sealed", JOBS, "test batch")
    assert published.callback.descriptor == status.callback
    assert all(r.descriptor for r in published.results)
    procs.worker("batch1", [qname("w_batch_member"), qname("w_batch_done")], 2)
    wait_for_workers(app, ["batch1"])
    wait_until(lambda: results.llen(key("done:w_batch_done")) >= 1, 60, what="the batch's callback", interval=0.2)
    assert results.llen(key("runs:w_batch_member")) == JOBS  # every task ran before it
    time.sleep(1)  # a second callback would have run by now
    assert [r.decode() for r in results.lrange(key("done:w_batch_done"), 0, -1)] == [
        f"nightly:{JOBS}:{JOBS - len(FAILING)}:{len(FAILING)}"]
    assert service.batch_status(published.batch).state == "released"
