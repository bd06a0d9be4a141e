# mypy: disable-error-code="no-untyped-call,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""``celery beat`` for PinLater tasks: a task with ``run_every_s`` is
published that often without a hand-written ``beat_schedule`` entry.

The entries are added when beat builds its scheduler, which is after it has
imported the task modules (``PINLATER_CELERY_IMPORTS``); entries an app sets
in ``beat_schedule`` by hand win over a task's own. Publishing is an
enqueue, so a periodic job is an ordinary PinLater job: retried, counted
and visible like any other.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler


def periodic_schedule(app: Celery) -> dict[str, dict[str, Any]]:
    """Beat entries of the app's tasks that ask for one."""
    app.finalize(auto=True)
    schedule: dict[str, dict[str, Any]] = {}
    for name, task in sorted(app.tasks.items()):
        every = getattr(task, "run_every_s", None)
        if every:
            schedule[f"pinlater:{name}"] = {
                "task": name,
                "schedule": float(every),
                "args": tuple(getattr(task, "run_every_args", ())),
            }
    return schedule


class PinLaterScheduler(PersistentScheduler):
    def setup_schedule(self) -> None:
        self.app.conf.beat_schedule = {**periodic_schedule(self.app), **(self.app.conf.beat_schedule or {})}
        super().setup_schedule()
