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
every tick exactly once: an interval entry ticks at multiples of its
interval since the epoch (``EpochTicks``), the same instants in every
beat, and a crontab entry at the minutes it matches (in its timezone),
whenever a beat gets to publish it; each tick is published with the
idempotency key ``beat:ENTRY:TICK_MS``, so the job service keeps the first
publish of a tick and answers the others with its job. The service
remembers a key for its idempotency window only
(``PINLATER_IDEMPOTENCY_WINDOW_MS``), so a beat skips, with a warning, a
tick older than half that window: a tick is lost only if no beat was alive
from the tick until half the window after it. A tick's time travels in the
message header ``pinlater_beat_tick`` (epoch milliseconds). Entries of
other schedule kinds (solar, custom) have no key: run one beat for them.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler, ScheduleEntry
from celery.schedules import crontab, schedstate, schedule
from celery.utils.time import timezone

from pinlater.limits import MAX_IDEMPOTENCY_KEY_LEN
from workers.settings import TransportSettings

log = logging.getLogger(__name__)

TICK_HEADER = "pinlater_beat_tick"
_KEY_HEADER = "pinlater_idempotency_key"
_MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class Stale:
    """``tick_ms``'s answer for a tick too old to publish safely: it is at
    or before ``by_ms`` (epoch milliseconds)."""

    by_ms: int

    def __str__(self) -> str:
        return datetime.fromtimestamp(self.by_ms / 1000, UTC).isoformat(timespec="milliseconds")


class EpochTicks(schedule):
    """Every ``run_every`` at multiples of it since the epoch (UTC): the
    same instants in every process, whenever each started. A tick missed
    (beat down) is published once when it is back, as Celery does, unless
    it is too old by then (``tick_ms``)."""

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


def max_tick_age_ms(window_ms: int) -> int:
    """How old a tick may be and still be published, for the job service's
    idempotency window ``window_ms``."""
    # The window starts when the first publish of the tick is stored, at or
    # after the tick; a later publish must reach the service before it ends.
    # Half the window leaves the other half for that publish's own time (the
    # client retries a lost reply for 30 s plus a timeout) and for clocks of
    # beats and service that differ, with nothing to tune.
    return window_ms // 2


def tick_ms(entry_schedule: Any, now: datetime, max_age_ms: int) -> int | Stale | None:
    """The time of the tick a publish at ``now`` belongs to; ``Stale`` when
    that tick is ``max_age_ms`` old or more (a crontab: no minute it
    matches is younger); None for a schedule whose ticks are not the same
    in every beat."""
    if isinstance(entry_schedule, EpochTicks):
        tick = round(entry_schedule.tick_of(now) * float(entry_schedule.seconds) * 1000)
        return tick if _epoch_ms(entry_schedule, now) - tick < max_age_ms else Stale(tick)
    if isinstance(entry_schedule, crontab):
        return _crontab_tick_ms(entry_schedule, now, max_age_ms)
    return None


def _crontab_tick_ms(cron: crontab, now: datetime, max_age_ms: int) -> int | Stale:
    """The latest minute at or before ``now`` that ``cron`` matches, younger
    than ``max_age_ms``: the minute it was scheduled for, however late the
    publish."""
    # The fields are in the crontab's zone, as celery's crontab reads them.
    zone = timezone.get_timezone(cron.tz)
    now_ms = _epoch_ms(cron, now)
    minute_ms = now_ms - now_ms % _MINUTE_MS
    while now_ms - minute_ms < max_age_ms:
        if _cron_matches(cron, datetime.fromtimestamp(minute_ms / 1000, UTC).astimezone(zone)):
            return minute_ms
        minute_ms -= _MINUTE_MS
    return Stale(minute_ms)


def _epoch_ms(entry_schedule: Any, at: datetime) -> int:
    # A naive time is UTC, as the schedule itself takes it.
    aware: datetime = entry_schedule.maybe_make_aware(at)
    return math.floor(aware.timestamp() * 1000)


def _cron_matches(cron: crontab, at: datetime) -> bool:
    """Whether ``at`` (in the crontab's zone) is one of its minutes: every field must match."""
    return (at.minute in cron.minute and at.hour in cron.hour and at.isoweekday() % 7 in cron.day_of_week
            and at.day in cron.day_of_month and at.month in cron.month_of_year)


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
    tick_max_age_ms: int

    def setup_schedule(self) -> None:
        # The window as this process's job service reads it (environment,
        # then the app's ``pinlater_env``): a bad setting stops beat at start.
        service = TransportSettings.from_options(self.app.conf.broker_transport_options).pinlater
        self.tick_max_age_ms = max_tick_age_ms(service.idempotency_window_ms)
        entries = {**periodic_schedule(self.app), **(self.app.conf.beat_schedule or {})}
        self.app.conf.beat_schedule = {name: _aligned(entry) for name, entry in entries.items()}
        super().setup_schedule()

    def apply_async(self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        # The entry is reserved (beat's loop did it before calling, with
        # advance=False) even when its tick is skipped: beat moves on to the
        # next tick instead of trying this one again at every loop.
        if advance:
            entry = self.reserve(entry)
        tick = tick_ms(entry.schedule, self.app.now(), self.tick_max_age_ms)
        if isinstance(tick, Stale):
            log.warning("beat: skipped the tick of %s at or before %s: older than %d ms, another beat may have"
                        " published it and the job service forgotten its key", entry.name, tick,
                        self.tick_max_age_ms)
            return None  # nothing sent: celery's apply_entry logs no result id then
        if tick is not None:
            # A copy: the schedule keeps the entry's own options.
            entry = copy.copy(entry)
            headers = {**(entry.options.get("headers") or {}), TICK_HEADER: tick,
                       _KEY_HEADER: tick_key(entry.name, tick)}
            entry.options = {**entry.options, "headers": headers}
        return super().apply_async(entry, producer, advance=False, **kwargs)
