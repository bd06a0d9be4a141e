"""The tiny app's manifest."""

from __future__ import annotations

from pinlater.kit.apps import App
from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy

QUEUE = "tinyapp_notes"

APP = App(
    name="tinyapp",
    queues=(QueueConfig(QUEUE, claim_timeout_ms=30_000,
                        retry=RetryPolicy(kind="exponential", retries=3, base_ms=100, max_delay_ms=1000)),),
    task_modules=("tests.support.tinyapp.tasks",),
    tables="tests.support.tinyapp.tables:defined_tables",
    panel="tests.support.tinyapp.panel:TinyPanel.from_env",
    cli="tests.support.tinyapp.cli:main",
)
