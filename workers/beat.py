# mypy: disable-error-code="no-untyped-call,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""``celery beat`` for PinLater tasks: a task with ``run_every_s`` is
published that often without a hand-written ``beat_schedule`` entry, and
any number of beats may run at once: each tick is published once.

The entries are added when beat builds its scheduler, which is after it has
imported the task modules (``PINLATER_CELERY_IMPORTS``); entries an app sets
in ``beat_schedule`` by hand win over a task's own. Publishing is an
enqueue, so a periodic job is an ordinary PinLater job: retried, counted
and visible like any other.

Several beats (one per host, say, each with its own ``-s`` file) publish
every tick exactly once, and while one of them is alive no tick is lost:
an interval entry ticks at multiples of its interval since the epoch
(``EpochTicks``), the same instants in every beat, and a crontab entry at
its minutes; each tick is published with the idempotency key
``beat:ENTRY:TICK_MS``, so the job service keeps the first publish of a
tick and answers the others with its job. A tick's time travels in the
message header ``pinlater_beat_tick`` (epoch milliseconds). Entries of
other schedule kinds (solar, custom) have no key: run one beat for them.
"""

from __future__ import annotations

import copy
import hashlib
import math
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler, ScheduleEntry
from celery.schedules import crontab, schedstate, schedule

from pinlater.limits import MAX_IDEMPOTENCY_KEY_LEN

TICK_HEADER = "pinlater_beat_tick"
_KEY_HEADER = "pinlater_idempotency_key"


class EpochTicks(schedule):
    """Every ``run_every`` at multiples of it since the epoch (UTC): the
    same instants in every process, whenever each started. A tick missed
    (beat down) is published once when it is back, as Celery does."""

    def __init__(self, run_every: float | timedelta | None = None, relative: bool = False,
                 nowfun: Any = None, app: Celery | None = None) -> None:
        super().__init__(run_every, False, nowfun, app)
        if not self.seconds > 0:
            raise ValueError(f"a periodic entry's interval must be above 0 seconds, got {run_every!r}")

    def tick_of(self, at: datetime) -> int:
        """The index of the last tick at or before ``at``."""
        aware: datetime = self.maybe_make_aware(at)
        return math.floor(aware.timestamp() / float(self.seconds))

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = self.maybe_make_aware(self.now())
        current = self.tick_of(now)
        until_next = (current + 1) * self.seconds - now.timestamp()
        return schedstate(is_due=current > self.tick_of(last_run_at), next=max(until_next, 0.001))

    def __repr__(self) -> str:
        return f"<epoch ticks: every {self.seconds:g}s>"


def tick_ms(entry_schedule: Any, now: datetime) -> int | None:
    """The time of the tick a publish at ``now`` belongs to, or None for a
    schedule whose ticks are not the same in every beat."""
    if isinstance(entry_schedule, EpochTicks):
        return round(entry_schedule.tick_of(now) * float(entry_schedule.seconds) * 1000)
    if isinstance(entry_schedule, crontab):
        return math.floor(now.timestamp() / 60) * 60_000
    return None


def tick_key(entry_name: str, tick: int) -> str:
    """The idempotency key of an entry's tick (a long name is hashed to fit)."""
    key = f"beat:{entry_name}:{tick}"
    if len(key) > MAX_IDEMPOTENCY_KEY_LEN:
        key = f"beat:{hashlib.sha256(entry_name.encode()).hexdigest()}:{tick}"
    return key


def _aligned(entry: dict[str, Any]) -> dict[str, Any]:
    """An interval entry (a number, a timedelta or a plain ``schedule``)
    ticking on the epoch grid; others as they are."""
    every: Any = entry.get("schedule")
    if isinstance(every, int | float | timedelta) and not isinstance(every, bool):
        return {**entry, "schedule": EpochTicks(every)}
    if type(every) is schedule:
        return {**entry, "schedule": EpochTicks(every.run_every)}
    return entry


def periodic_schedule(app: Celery) -> dict[str, dict[str, Any]]:
    """Beat entries of the app's tasks that ask for one."""
    app.finalize(auto=True)
    schedule_: dict[str, dict[str, Any]] = {}
    for name, task in sorted(app.tasks.items()):
        every = getattr(task, "run_every_s", None)
        if every:
            schedule_[f"pinlater:{name}"] = {
                "task": name,
                "schedule": EpochTicks(float(every)),
                "args": tuple(getattr(task, "run_every_args", ())),
            }
    return schedule_


class PinLaterScheduler(PersistentScheduler):
    def setup_schedule(self) -> None:
        entries = {**periodic_schedule(self.app), **(self.app.conf.beat_schedule or {})}
        self.app.conf.beat_schedule = {name: _aligned(entry) for name, entry in entries.items()}
        super().setup_schedule()

    def apply_async(self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        if advance:
            entry = self.reserve(entry)
        tick = tick_ms(entry.schedule, self.app.now())
        if tick is not None:
            # A copy: the schedule keeps the entry's own options.
            entry = copy.copy(entry)
            headers = {**(entry.options.get("headers") or {}), TICK_HEADER: tick,
                       _KEY_HEADER: tick_key(entry.name, tick)}
            entry.options = {**entry.options, "headers": headers}
        return super().apply_async(entry, producer, advance=False, **kwargs)
