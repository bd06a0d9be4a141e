"""The backfill's own PinLater queue and the config it gets when first
created (by the first worker or the first ``start``; after that it belongs
to the operators: ``pinlater-backfill start --rate``, ``pinlater set-rate``,
the dashboard). Its rate limit is what keeps a backfill from slowing the
real-time queues: they have their own."""

from __future__ import annotations

from typing import Any

from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy

QUEUE = "backfill"
# Pages per second across every worker: modest, so a backfill started
# without thinking cannot crowd out the real-time feed writes.
DEFAULT_RATE = 1.0
# Pages running at once across every worker.
DEFAULT_MAX_RUNNING = 1
# A page waits out an outage of MySQL or a cluster: 1 s, 2 s ... 5 s, then
# doubling up to 5 minutes, 500 times (about 40 hours).
RETRY = RetryPolicy(
    kind="linear_then_exponential", retries=500, base_ms=1000, linear_retries=5, max_delay_ms=300_000
)
# A page of 500 users takes seconds; the task heartbeats its claim anyway.
CLAIM_TIMEOUT_MS = 120_000


def create_options() -> dict[str, Any]:
    """``create_queue`` keyword arguments of the backfill queue."""
    return {"max_dequeue_rate": DEFAULT_RATE, "max_running": DEFAULT_MAX_RUNNING, "retry": RETRY,
            "claim_timeout_ms": CLAIM_TIMEOUT_MS}


def page_write_width(config: QueueConfig) -> int | None:
    """How many of a page's HBase writes go out at once
    (``tasks.hbase.thrift2.write_width``): one under a cap, so that the cap
    bounds the calls a backfill has in flight beside the readers it is
    there to protect; without a cap (a first load, nobody to protect) as
    many as the pool has connections, as a raw writer would."""
    return 1 if config.max_running is not None else None
