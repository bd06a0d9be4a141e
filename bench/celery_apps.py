# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The two apps of ``bench/celery.py``: the same no-op task and worker
settings on Celery over PinLater and on stock Celery over the stock Redis
broker. Workers are started with ``-A bench.celery_apps:pinlater_app`` or
``-A bench.celery_apps:stock_app``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from workers.app import make_app

QUEUE = "bench_noop"
STOCK_BROKER = os.environ.get("BENCH_STOCK_BROKER", "redis://127.0.0.1:16379/7")
# The prefetch window per solo worker process (``bench/celery.py
# --prefetch-multiplier``): 16 by default, Dramatiq's default window for the
# 8 threads of each of its processes in the same bench.
PREFETCH_MULTIPLIER = int(os.environ.get("BENCH_PREFETCH_MULTIPLIER", "16"))
# Identical for both: late ACKs, the same prefetch window, no results, no
# events (Flower is not running in a benchmark).
COMMON: dict[str, Any] = {
    "task_acks_late": True,
    "worker_prefetch_multiplier": PREFETCH_MULTIPLIER,
    "task_ignore_result": True,
    "result_backend": None,
    "worker_send_task_events": False,
    "broker_connection_retry_on_startup": True,
}

pinlater_app = make_app("bench_pinlater", imports=(), **COMMON)
stock_app = Celery("bench_stock", broker=STOCK_BROKER, set_as_current=False)
stock_app.conf.update(COMMON, task_routes={"bench.noop": {"queue": QUEUE}})


@pinlater_app.task(name="bench.noop", pinlater_queue=QUEUE, shared=False)
def pinlater_noop() -> None:
    return None


@stock_app.task(name="bench.noop", shared=False)
def stock_noop() -> None:
    return None
