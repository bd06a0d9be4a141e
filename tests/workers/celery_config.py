"""A Celery config module (``CELERY_CONFIG_MODULE``) for the default-queue
tests: Celery's default queue gets this test session's suffix, so that
sessions sharing the Redis stores never run each other's default-queue
jobs. It imports no task module (a client that loads it still has none)."""

from __future__ import annotations

import os

# Set by tests.workers.celery_tasks in the test process, inherited by its
# workers and clients.
task_default_queue = f"celery_{os.environ['PINLATER_WORKER_TESTS_RUN']}"
