"""Fairness keys under Celery workers: a task's ``fairness_key_of`` keys
each publish by its arguments, ``apply_async(fairness_key=...)`` sets one
publish's key, and a worker is served the keys in turn: a small tenant's
jobs published after a big tenant's backlog run among its first jobs, in
process and through the Thrift server."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers

pytestmark = pytest.mark.spread_cases

BIG = 40
SMALL = 4


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_a_small_tenant_is_served_among_a_big_tenants_first_jobs(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    task = app.tasks["tests.w_fair"]
    big = [task.delay("big", i).descriptor for i in range(BIG)]
    small = [task.delay("small", i).descriptor for i in range(SMALL - 1)]
    small.append(task.apply_async(("big", 99), fairness_key="small").descriptor)  # the option wins
    keys = {d: info.key for d, info in service.lookup(big + small).items()}
    assert {keys[d] for d in big} == {"big"} and {keys[d] for d in small} == {"small"}
    procs.worker("fair1", [qname("w_fair")], 1)
    wait_for_workers(app, ["fair1"])
    done = key("order:w_fair")
    wait_until(lambda: results.llen(done) >= BIG + SMALL, 60, what="every fair task", interval=0.2)
    order = [raw.decode() for raw in results.lrange(done, 0, -1)]
    last_small = max(i for i, tenant in enumerate(order) if tenant == "small")
    print(f"\nthe last of the small tenant's {SMALL} jobs ran {last_small + 1}th of {len(order)}")
    # In turn, the small tenant's last job is about the 8th; a worker's
    # prefetch (claimed in one batch, run in claim order) moves it by a few.
    assert last_small < 2 * SMALL + 6
