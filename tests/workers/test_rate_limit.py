"""A queue's rate limit holds across every worker together, and operators
change it live: 50 jobs/s with 2 workers of 4 processes measured over 20 s;
pause gives zero starts; resume restores the flow; a new rate takes effect
within 2 s, without a restart."""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from pinlater import Job
from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers

# Each backend's case takes tens of seconds, mostly waiting: they may run side by side.
pytestmark = pytest.mark.spread_cases

RATE = 50.0
MEASURE_S = 20.0


def _starts(results: redis.Redis[bytes]) -> list[float]:
    return sorted(float(t) for t in results.lrange(key("starts:w_rate"), 0, -1))


def _between(starts: list[float], a: float, b: float) -> int:
    return sum(1 for t in starts if a <= t < b)


@pytest.mark.parametrize("backend", ["redis", "mysql", "redis+thrift"], indirect=True)
@pytest.mark.timeout(120)
def test_rate_limit_pause_resume_and_live_change(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    app.tasks["tests.w_rate"]
    service.create_queue(qname("w_rate"), max_dequeue_rate=RATE)
    service.set_rate(qname("w_rate"), RATE)
    service.pause(qname("w_rate"))
    for _ in range(5):
        service.enqueue(qname("w_rate"), [Job(b"x")] * 1000)
    names = ["rate1", "rate2"]
    for name in names:
        procs.worker(name, [qname("w_rate")], 4)
    wait_for_workers(app, names)
    service.resume(qname("w_rate"))
    t0: float = wait_until(lambda: min(_starts(results), default=None), 10, what="the first start")
    # Measure from one second in, once the bucket's initial burst is spent.
    wait_until(lambda: time.monotonic() > t0 + 1.0 + MEASURE_S, MEASURE_S + 5, interval=0.5)
    measured = _between(_starts(results), t0 + 1.0, t0 + 1.0 + MEASURE_S) / MEASURE_S
    per_second = [_between(_starts(results), t0 + i, t0 + i + 1) for i in range(int(MEASURE_S) + 1)]
    print(f"\nstarts per second at {RATE:g}/s: {per_second}")
    assert abs(measured - RATE) <= 0.15 * RATE, f"measured {measured:.1f} jobs/s for a limit of {RATE:g}"

    paused_at = time.monotonic()
    service.pause(qname("w_rate"))
    time.sleep(4.0)
    # Workers see a config change within its TTL (1 s); then nothing starts.
    assert _between(_starts(results), paused_at + 1.5, paused_at + 4.0) == 0

    resumed_at = time.monotonic()
    service.resume(qname("w_rate"))
    time.sleep(3.0)
    assert _between(_starts(results), resumed_at + 1.0, resumed_at + 3.0) >= 0.5 * RATE * 2

    # A lower rate: a higher one also measured the workers' spare capacity,
    # which a loaded machine lacked (76 of 100 jobs/s on MySQL in CI).
    changed_at = time.monotonic()
    service.set_rate(qname("w_rate"), RATE / 2)
    time.sleep(6.0)
    slower = _between(_starts(results), changed_at + 2.0, changed_at + 6.0) / 4.0
    assert abs(slower - RATE / 2) <= 0.2 * RATE / 2, f"{slower:.1f} jobs/s 2 s after the rate became {RATE / 2:g}"
