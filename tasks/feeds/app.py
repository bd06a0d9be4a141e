"""The following feeds, as an app (``pinlater.kit.apps``): what it brings to
the workers, HBase, the dashboard, the backfill and the docs."""

from __future__ import annotations

from pinlater.kit.apps import App
from pinlater.queue_config import QueueConfig
from tasks.feeds import queues

APP = App(
    name="feeds",
    queues=tuple(QueueConfig(name, **queues.create_options(name)) for name in queues.ALL),
    task_modules=("tasks.feeds.tasks",),
    tables="tasks.feeds.tables:defined_tables",
    settings="tasks.feeds.settings:SETTINGS",
    panel="tasks.feeds.panel:HBasePanel.from_env",
    backfill_kinds=("tasks.feeds.backfill_kind:FEEDS",),
    cli="tasks.feeds.cli:main",
)
