"""Bulk backfills, as an app (``pinlater.kit.apps``): its queue and task for
the workers, and its dashboard panel. The kinds it runs are the other apps'."""

from __future__ import annotations

from pinlater.kit.apps import App
from pinlater.queue_config import QueueConfig
from tasks.backfill import queue

APP = App(
    name="backfill",
    queues=(QueueConfig(queue.QUEUE, **queue.create_options()),),
    task_modules=("tasks.backfill.tasks",),
    panel="tasks.backfill.panel:BackfillPanel.from_env",
    cli="tasks.backfill.cli:main",
)
