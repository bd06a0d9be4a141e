"""Periodic jobs without a single point of failure (``workers.beat``): two
``celery beat`` processes publish every tick of a 1-second entry, one of
them is SIGKILLed part way, and every tick over the minute ran exactly
once; and the pieces that make it so, without processes."""

from __future__ import annotations

import random
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedule

from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers
from workers.beat import EpochTicks, _aligned, tick_key, tick_ms

RUN_S = 60


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_epoch_ticks_are_the_same_instants_whenever_a_beat_started() -> None:
    now = [1_000_000.25]
    ticks = EpochTicks(1.0, nowfun=lambda: _at(now[0]))
    # Last run in the same second: not due; the next check is at the boundary.
    due, next_s = ticks.is_due(_at(1_000_000.01))
    assert not due and next_s == pytest.approx(0.75)
    due, next_s = ticks.is_due(_at(999_999.99))
    assert due and next_s == pytest.approx(0.75)
    assert tick_ms(ticks, _at(now[0])) == 1_000_000_000
    five = EpochTicks(timedelta(seconds=5))
    assert tick_ms(five, _at(1_000_003.9)) == 1_000_000_000
    assert tick_ms(crontab(), _at(1_000_019.5)) == 999_960_000  # its minute
    assert tick_ms(schedule(5.0), _at(1_000_003.9)) is None
    with pytest.raises(ValueError, match="above 0 seconds"):
        EpochTicks(0)


def test_interval_entries_tick_on_the_epoch_grid_and_keys_fit() -> None:
    assert isinstance(_aligned({"task": "t", "schedule": 30})["schedule"], EpochTicks)
    assert isinstance(_aligned({"task": "t", "schedule": timedelta(minutes=1)})["schedule"], EpochTicks)
    assert isinstance(_aligned({"task": "t", "schedule": schedule(2.0)})["schedule"], EpochTicks)
    cron = crontab(minute="*/5")
    assert _aligned({"task": "t", "schedule": cron})["schedule"] is cron
    assert tick_key("pinlater:tests.w_beat", 1_000) == "beat:pinlater:tests.w_beat:1000"
    long_key = tick_key("x" * 500, 1_000)
    assert len(long_key) <= 200 and long_key.endswith(":1000")
    assert long_key != tick_key("y" * 500, 1_000)


@pytest.mark.serial
@pytest.mark.timeout(RUN_S + 90)
def test_two_beats_publish_every_tick_once_and_one_killed_loses_none(
    app: Celery, service: JobService, procs: Processes, results: redis.Redis[bytes], tmp_path: object,
) -> None:
    procs.worker("beatw", [qname("w_beat")], 2)
    wait_for_workers(app, ["beatw"])
    beats = ["beat1", "beat2"]
    for name in beats:
        procs.start(name, ["beat", "-s", f"{tmp_path}/{name}-schedule", "-l", "info"])
    ticks = key("ticks:w_beat")
    wait_until(lambda: results.hlen(ticks) >= 3, 30, what="the first ticks")
    started = time.time()
    kill_after = random.uniform(10, RUN_S - 20)
    print(f"beat1 is killed {kill_after:.1f}s in")
    time.sleep(kill_after)
    procs.stop("beat1", signal.SIGKILL)
    time.sleep(RUN_S - kill_after)
    procs.stop("beat2", signal.SIGKILL)
    queue = qname("w_beat")

    def drained() -> bool:
        return service.count(queue, "pending") + service.count(queue, "running") == 0

    wait_until(drained, 30, what="the published ticks to run")
    counts = {int(t): int(n) for t, n in results.hgetall(ticks).items()}
    assert all(t % 1000 == 0 for t in counts), sorted(counts)
    first, last = min(counts), max(counts)
    assert (last - first) / 1000 >= RUN_S - 1, (first, last, started)
    missing = sorted(set(range(first, last + 1000, 1000)) - set(counts))
    twice = {t: n for t, n in counts.items() if n != 1}
    assert not missing and not twice, f"ticks missing: {missing}; run more than once: {twice}"
    # Both beats published: the second of each pair was answered from the first.
    for name in beats:
        assert "Sending due task" in procs.log(name), procs.log(name)[-2000:]
