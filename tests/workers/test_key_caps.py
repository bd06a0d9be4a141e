"""A queue's per-key cap under Celery workers: two workers of four
processes each run at most 2 jobs of one tenant at once, by the tasks' own
start and end times, while the other tenant's run beside them, in process
and through the Thrift server."""

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

PER_TENANT = 10
TASK_S = 0.3


def _spans(results: redis.Redis[bytes]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    for raw in results.lrange(key("spans:w_key_capped"), 0, -1):
        tenant, start, end = raw.decode().split(",")
        out[tenant].append((float(start), float(end)))
    return out


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_key_cap_holds_over_every_worker(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    task = app.tasks["tests.w_key_capped"]
    queue = qname("w_key_capped")
    task.delay("a", TASK_S)  # the first publish creates the queue
    service.set_key_concurrency(queue, 2)
    for _ in range(PER_TENANT - 1):
        task.delay("a", TASK_S)
    for _ in range(PER_TENANT):
        task.delay("b", TASK_S)
    names = ["kcap1", "kcap2"]
    for name in names:
        procs.worker(name, [queue], 4)
    wait_for_workers(app, names)
    wait_until(lambda: sum(map(len, _spans(results).values())) >= 2 * PER_TENANT, 60,
               what=f"{2 * PER_TENANT} key-capped tasks", interval=0.2)
    spans = _spans(results)
    most = {tenant: most_at_once(s) for tenant, s in spans.items()}
    both = most_at_once(spans["a"] + spans["b"])
    print(f"\nat most {most} per tenant ran at once ({both} in all), for a per-key cap of 2 over 8 processes")
    assert {len(s) for s in spans.values()} == {PER_TENANT}
    assert most == {"a": 2, "b": 2}
    assert both >= 3  # the tenants ran beside each other, not one after the other
