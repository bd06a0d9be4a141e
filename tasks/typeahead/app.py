"""The typeahead, as an app (``pinlater.kit.apps``): what it brings to the
workers, HBase, the backfill and the docs."""

from __future__ import annotations

from pinlater.kit.apps import App
from pinlater.queue_config import QueueConfig
from tasks.typeahead import queues

APP = App(
    name="typeahead",
    queues=tuple(QueueConfig(name, **queues.create_options(name)) for name in queues.ALL),
    task_modules=("tasks.typeahead.tasks",),
    tables="tasks.typeahead.tables:defined_tables",
    settings="tasks.typeahead.settings:SETTINGS",
    backfill_kinds=("tasks.typeahead.backfill_kind:CONTACTS", "tasks.typeahead.backfill_kind:SECOND_DEGREE"),
    cli="tasks.typeahead.cli:main",
)
