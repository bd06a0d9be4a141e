"""Failures follow PinLater's retry policy: the delays are read back from
the job's run_after, the job ends FAILED after its attempts, and an
operator's ``pinlater retry-failed`` brings it back. ``self.retry()`` is a
failure ACK of the same job, not a new message."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis
from celery import Celery

from pinlater import JobState
from pinlater.service import JobService
from tests.servers import REPO
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes

BOTH = pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)


Seen = list[tuple[JobState, int, int, int]]


def _watch(service: JobService, descriptor: str, until: JobState, timeout: float) -> Seen:
    """Every distinct (state, attempts_remaining, run_after, updated_at) seen."""
    seen: Seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = service.lookup([descriptor])[descriptor]
        row = (info.state, info.attempts_remaining, info.run_after_ms, info.updated_at_ms)
        if not seen or seen[-1] != row:
            seen.append(row)
        if info.state == until:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"{descriptor} never reached {until.name}: {seen}")


@BOTH
@pytest.mark.timeout(90)
def test_failures_retry_on_the_policy_delays_then_fail_then_retry_failed_runs_it(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes], env: dict[str, str]
) -> None:
    task = app.tasks["tests.w_fail"]  # custom policy: 1 s, then 2 s; 3 attempts
    descriptor = task.delay().descriptor
    procs.worker("fail", [qname("w_fail")], 1)
    seen = _watch(service, descriptor, JobState.FAILED, 40)

    retries = [(attempts, run_after - updated) for state, attempts, run_after, updated in seen
               if state == JobState.PENDING and attempts < 3]
    assert [a for a, _ in retries] == [2, 1], seen
    assert [delay for _, delay in retries] == [1000, 2000], f"delays read back from run_after: {seen}"
    assert seen[-1][1] == 0
    assert results.llen(key("attempts:w_fail")) == 3

    results.set(key("allow:w_fail"), 1)
    out = subprocess.run(
        [sys.executable, "-m", "pinlater.cli", "--json", "retry-failed", qname("w_fail"), "--attempts", "1"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["retried"] == 1
    wait_until(lambda: service.lookup([descriptor])[descriptor].state == JobState.SUCCEEDED, 20,
               what="the retried job to succeed")
    assert results.llen(key("attempts:w_fail")) == 4


@BOTH
@pytest.mark.timeout(60)
def test_self_retry_is_a_delayed_failure_ack_of_the_same_job(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    descriptor = app.tasks["tests.w_retry"].delay().descriptor
    procs.worker("retry", [qname("w_retry")], 1)
    seen = _watch(service, descriptor, JobState.SUCCEEDED, 30)
    pending = [(attempts, run_after - updated) for state, attempts, run_after, updated in seen
               if state == JobState.PENDING and run_after > updated]
    assert pending and pending[0][1] == 2000, seen
    assert int(results.get(key("runs:w_retry")) or 0) == 2
    # Still one job: the retry published nothing.
    total = sum(service.count(qname("w_retry"), s) for s in JobState)
    assert total == 1
