"""Nothing is lost when worker processes die: 2,000 jobs run while a
bounded loop SIGKILLs a random worker process (a pool process or the main
process) every couple of seconds and restarts it. Claim timeout 3 s, a
monitor running; every job must end SUCCEEDED, each having run at least
once. How many ran more than once is reported (at-least-once delivery)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import redis
from celery import Celery

from pinlater import JobState
from pinlater.operators import Monitor
from pinlater.service import JobService
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, children, wait_for_workers

# Each backend's case takes tens of seconds, mostly waiting: they may run side by side.
pytestmark = pytest.mark.spread_cases

JOBS = 2000
KILL_EVERY_S = (1.5, 2.5)
KILLING_FOR_S = 20.0


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(150)
def test_sigkilled_workers_lose_nothing(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes], monitor: Monitor
) -> None:
    task = app.tasks["tests.w_chaos"]
    with app.producer_or_acquire() as producer:
        descriptors = [task.apply_async((i,), producer=producer).descriptor for i in range(JOBS)]
    names = ["chaos1", "chaos2"]
    for name in names:
        procs.worker(name, [qname("w_chaos")], 2)
    wait_for_workers(app, names)

    rng = random.Random(4)
    kills = {"main": 0, "pool": 0}
    started = time.monotonic()
    deadline = started + 120
    while time.monotonic() < deadline:
        done = service.count(qname("w_chaos"), JobState.SUCCEEDED)
        if done == JOBS:
            break
        if time.monotonic() - started < KILLING_FOR_S:
            name = rng.choice(names)
            main = procs.procs[name]
            victims = [main.pid, *children(main.pid)]
            victim = rng.choice(victims)
            if victim == main.pid:
                # The main process dies; its pool processes go with it.
                procs.restart(name)
                kills["main"] += 1
            else:
                os.kill(victim, signal.SIGKILL)
                kills["pool"] += 1
            time.sleep(rng.uniform(*KILL_EVERY_S))
        else:
            time.sleep(0.5)

    states = service.lookup(descriptors)
    by_state = {s: sum(1 for d in descriptors if states[d].state == s) for s in JobState}
    runs = {k.decode(): int(v) for k, v in results.hgetall(key("runs:w_chaos")).items()}
    twice = sum(1 for d in descriptors if runs.get(d, 0) > 1)
    print(f"\nchaos ({service.operators.shard_ids()}): kills {kills}, {by_state[JobState.SUCCEEDED]}/{JOBS} succeeded, "
          f"{twice} ran more than once, max runs {max(runs.values(), default=0)}")
    assert kills["main"] + kills["pool"] >= 5
    assert by_state[JobState.SUCCEEDED] == JOBS, by_state
    assert all(runs.get(d, 0) >= 1 for d in descriptors), "a job succeeded without running"
