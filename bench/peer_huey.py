# mypy: disable-error-code="no-untyped-call,untyped-decorator"
# (Dramatiq and Huey ship without complete type hints.)
"""Huey, a peer of ``bench/celery.py``: the same no-op task on Huey's
Redis storage, results off (as Celery's ``task_ignore_result``). Workers:
``huey_consumer bench.peer_huey.huey -k thread -w 8``, two consumers; the
Redis comes from ``BENCH_HUEY_URL``."""

from __future__ import annotations

import os

from huey import RedisHuey

URL = os.environ.get("BENCH_HUEY_URL", "redis://127.0.0.1:16379/12")

huey = RedisHuey("bench", url=URL, results=False)


@huey.task()
def noop() -> None:
    return None


def remaining() -> int:
    """Tasks still queued. Huey has no acks: a task leaves Redis when a
    worker takes it, so the up to 16 being run at the end are not counted."""
    return int(huey.pending_count())
