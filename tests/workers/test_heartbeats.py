"""A long task keeps its claim through heartbeats; without them the claim
times out and the job runs again.

Scaled for CI: a 12 s task with a claim timeout of 3 s stands for a
real 60 s task with a 10 s claim timeout (same ratio of task length to
timeout, more than three timeouts long); ``PINLATER_SOAK=1`` runs the
full-size numbers. The monitor expires claims every 0.5 s."""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from pinlater import JobState
from pinlater.operators import Monitor
from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import LONG_TASK_S, key, qname
from tests.workers.harness import Processes, wait_for_workers

# Each backend's case takes tens of seconds, mostly waiting: they may run side by side.
pytestmark = pytest.mark.spread_cases

TASK_S = LONG_TASK_S
# The job without heartbeats sleeps longer: its re-run must come while its
# first run still sleeps, and on a busy machine the re-run came 10-12 s
# after the publish. The test waits for the re-run, not for this sleep.
NO_HEARTBEAT_TASK_S = 2 * TASK_S


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(int(3 * LONG_TASK_S) + 60)
def test_heartbeats_keep_a_long_task_and_their_absence_reruns_it(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes], monitor: Monitor
) -> None:
    procs.worker("long", [qname("w_long_hb"), qname("w_long_nohb")], 3)
    wait_for_workers(app, ["long"])
    with_hb = app.tasks["tests.w_long_hb"].delay(TASK_S).descriptor
    without_hb = app.tasks["tests.w_long_nohb"].delay(NO_HEARTBEAT_TASK_S).descriptor
    t0 = time.monotonic()

    def runs(queue: str, descriptor: str) -> int:
        return int(results.hget(key(f"runs:{queue}"), descriptor) or 0)

    # Without heartbeats: expired after ~3 s, claimed again and re-run
    # while the first run is still sleeping (it started after t0, so it
    # sleeps past t0 + NO_HEARTBEAT_TASK_S).
    wait_until(lambda: runs("w_long_nohb", without_hb) >= 2, NO_HEARTBEAT_TASK_S,
               what="the job without heartbeats to re-run")
    rerun_after = time.monotonic() - t0
    assert rerun_after < NO_HEARTBEAT_TASK_S

    wait_until(lambda: service.lookup([with_hb])[with_hb].state == JobState.SUCCEEDED, TASK_S + 10,
               what="the heartbeating job to succeed")
    info = service.lookup([with_hb])[with_hb]
    assert runs("w_long_hb", with_hb) == 1
    assert info.attempts_remaining == info.attempts_allowed, "the heartbeating job lost a claim"
    print(f"\nre-run without heartbeats after {rerun_after:.1f}s; with heartbeats ran once in "
          f"{time.monotonic() - t0:.1f}s")
