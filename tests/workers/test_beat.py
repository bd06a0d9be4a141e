"""Periodic jobs without a single point of failure (``workers.beat``): two
``celery beat`` processes publish every tick of a 1-second entry, one of
them is SIGKILLed part way, and every tick over the minute ran exactly
once; and the pieces that make it so, without processes."""

from __future__ import annotations

import logging
import random
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedule

from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers
from workers.beat import EpochTicks, PinLaterScheduler, Stale, _aligned, max_tick_age_ms, tick_key, tick_ms

RUN_S = 60
DAY_MS = 86_400_000
# The tick age a beat publishes with the job service's default window.
DEFAULT_AGE_MS = 300_000


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
    assert tick_ms(ticks, _at(now[0]), DEFAULT_AGE_MS) == 1_000_000_000
    five = EpochTicks(timedelta(seconds=5))
    assert tick_ms(five, _at(1_000_003.9), DEFAULT_AGE_MS) == 1_000_000_000
    assert tick_ms(crontab(), _at(1_000_019.5), DEFAULT_AGE_MS) == 999_960_000  # its minute
    assert tick_ms(schedule(5.0), _at(1_000_003.9), DEFAULT_AGE_MS) is None
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


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _ms(text: str) -> int:
    return round(_utc(text).timestamp() * 1000)


def _zoned_app(zone: str) -> Celery:
    app = Celery("beat-zone", set_as_current=False)
    app.conf.timezone = zone
    return app


def test_a_crontab_tick_is_the_minute_it_was_scheduled_for_however_late_the_publish() -> None:
    every_2h = crontab(minute="0", hour="*/2", app=_zoned_app("UTC"))
    for late in ("12:00:30", "12:01:10", "12:09:00", "13:00:00", "13:59:59"):
        assert tick_ms(every_2h, _utc(f"2024-03-05 {late}"), DAY_MS) == _ms("2024-03-05 12:00"), late
    assert tick_ms(every_2h, _utc("2024-03-05 14:00:05"), DAY_MS) == _ms("2024-03-05 14:00")
    # Its fields are in its zone: noon in Kolkata (UTC+5:30) is 06:30 UTC.
    kolkata = crontab(minute="0", hour="*/2", app=_zoned_app("Asia/Kolkata"))
    for late in ("06:30:30", "06:31:10", "06:39:00", "07:30:00"):
        assert tick_ms(kolkata, _utc(f"2024-03-05 {late}"), DAY_MS) == _ms("2024-03-05 06:30"), late
    assert tick_ms(kolkata, _utc("2024-03-05 08:30:05"), DAY_MS) == _ms("2024-03-05 08:30")
    # Every field must match; day 0 of the week is Sunday (2024-03-05 is a Tuesday).
    sundays = crontab(minute="15", hour="9", day_of_week="0", app=_zoned_app("UTC"))
    assert tick_ms(sundays, _utc("2024-03-05 12:00"), 3 * DAY_MS) == _ms("2024-03-03 09:15")
    firsts = crontab(minute="0", hour="0", day_of_month="1", month_of_year="3", app=_zoned_app("UTC"))
    assert tick_ms(firsts, _utc("2024-03-05 12:00"), 5 * DAY_MS) == _ms("2024-03-01 00:00")


def test_a_tick_older_than_half_the_idempotency_window_is_stale() -> None:
    assert max_tick_age_ms(600_000) == DEFAULT_AGE_MS
    hourly = EpochTicks(3600)
    assert tick_ms(hourly, _utc("2024-03-05 12:04:59.999"), DEFAULT_AGE_MS) == _ms("2024-03-05 12:00")
    assert tick_ms(hourly, _utc("2024-03-05 12:05"), DEFAULT_AGE_MS) == Stale(_ms("2024-03-05 12:00"))
    assert tick_ms(hourly, _utc("2024-03-05 12:30"), DEFAULT_AGE_MS) == Stale(_ms("2024-03-05 12:00"))
    every_2h = crontab(minute="0", hour="*/2", app=_zoned_app("UTC"))
    assert tick_ms(every_2h, _utc("2024-03-05 12:04:59"), DEFAULT_AGE_MS) == _ms("2024-03-05 12:00")
    # No minute of it within the age: the tick is at or before the oldest one looked at.
    assert tick_ms(every_2h, _utc("2024-03-05 12:05"), DEFAULT_AGE_MS) == Stale(_ms("2024-03-05 12:00"))
    assert tick_ms(every_2h, _utc("2024-03-05 13:00"), DEFAULT_AGE_MS) == Stale(_ms("2024-03-05 12:55"))
    assert str(Stale(_ms("2024-03-05 12:00"))) == "2024-03-05T12:00:00.000+00:00"
    # Other kinds have no key, so no age: published as they come.
    assert tick_ms(schedule(5.0), _utc("2024-03-05 12:30"), DEFAULT_AGE_MS) is None


# Beat's clock in the scheduler test; module level, as beat pickles its
# entries' schedules, ``nowfun`` included.
_BEAT_CLOCK = {"now": datetime.fromtimestamp(0, UTC)}


def _beat_now() -> datetime:
    return _BEAT_CLOCK["now"]


def test_beat_skips_a_stale_tick_once_and_publishes_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    app = Celery("beat-skip", broker="memory://", set_as_current=False)
    # A 2-minute window: a tick a minute old or more is not published.
    app.conf.broker_transport_options = {"pinlater_env": {"PINLATER_IDEMPOTENCY_WINDOW_MS": "120000"}}
    hourly = EpochTicks(3600, nowfun=_beat_now)
    app.conf.beat_schedule = {"hourly": {"task": "tests.not_registered", "schedule": hourly}}
    monkeypatch.setitem(_BEAT_CLOCK, "now", _utc("2024-03-05 11:00:01"))  # when this beat last ran it
    monkeypatch.setattr(app, "now", _beat_now)
    beat = PinLaterScheduler(app=app, schedule_filename=str(tmp_path / "beat-schedule"))
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(beat, "send_task", lambda *args, **options: sent.append(options))
    try:
        assert beat.tick_max_age_ms == 60_000
        _BEAT_CLOCK["now"] = _utc("2024-03-05 12:01:30")  # back after the 12:00 tick, 90 s late
        with caplog.at_level(logging.WARNING, "workers.beat"):
            beat.tick()
            beat.tick()  # reserved: not tried again
        skipped = [r.getMessage() for r in caplog.records if r.name == "workers.beat"]
        assert skipped == [
            "beat: skipped the tick of hourly at or before 2024-03-05T12:00:00.000+00:00: older than 60000 ms,"
            " another beat may have published it and the job service forgotten its key"
        ]
        assert not sent
        assert beat.schedule["hourly"].last_run_at == _utc("2024-03-05 12:01:30")
        _BEAT_CLOCK["now"] = _utc("2024-03-05 13:00:59")
        beat.tick()
        assert [o["headers"]["pinlater_beat_tick"] for o in sent] == [_ms("2024-03-05 13:00")]
        assert sent[0]["headers"]["pinlater_idempotency_key"] == f"beat:hourly:{_ms('2024-03-05 13:00')}"
    finally:
        beat.close()


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
