# mypy: disable-error-code="no-untyped-call,untyped-decorator"
# (Dramatiq and Huey ship without complete type hints.)
"""Dramatiq, a peer of ``bench/celery.py``: the same no-op task on
Dramatiq's Redis broker. Workers: ``dramatiq bench.peer_dramatiq
--processes 2 --threads 8``; the broker's Redis comes from
``BENCH_DRAMATIQ_URL``."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

QUEUE = "bench_noop"
URL = os.environ.get("BENCH_DRAMATIQ_URL", "redis://127.0.0.1:16379/11")

broker = RedisBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop() -> None:
    return None


def remaining() -> int:
    """Messages not yet acked: the broker keeps each in ``QUEUE.msgs`` until
    its ack (queued and prefetched ones alike)."""
    return int(broker.client.hlen(f"{broker.namespace}:{QUEUE}.msgs"))
