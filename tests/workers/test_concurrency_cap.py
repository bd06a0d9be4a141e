"""A task's ``max_running`` caps its queue over every worker together: two
workers of four processes each run at most 3 of its jobs at once, by the
tasks' own start and end times, in-process and through the Thrift server."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from pinlater.service import JobService
from tests.support.caps import most_at_once
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers

pytestmark = pytest.mark.spread_cases

JOBS = 24
TASK_S = 0.3


def _spans(results: redis.Redis[bytes]) -> list[tuple[float, float]]:
    pairs = (raw.decode().split(",") for raw in results.lrange(key("spans:w_capped"), 0, -1))
    return [(float(a), float(b)) for a, b in pairs]


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_tasks_cap_holds_over_every_worker(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    task = app.tasks["tests.w_capped"]
    for _ in range(JOBS):
        task.delay(TASK_S)  # the first publish creates the queue with the task's cap
    assert service.queue_config(qname("w_capped"), fresh=True).max_running == 3
    names = ["cap1", "cap2"]
    for name in names:
        procs.worker(name, [qname("w_capped")], 4)
    wait_for_workers(app, names)
    wait_until(lambda: len(_spans(results)) >= JOBS, 60, what=f"{JOBS} capped tasks", interval=0.2)
    spans = _spans(results)
    most = most_at_once(spans)
    print(f"\nat most {most} of {len(spans)} tasks ran at once, for a cap of 3 over 8 worker processes")
    assert 2 <= most <= 3
