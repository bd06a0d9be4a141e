"""The PinLater queues of the feed tasks, one task type each (see
docs/feeds.md), and the config each gets when it is first created (by the
first worker or the first ``FeedActions``; after that it is the
operators'). Application code, operators and other languages enqueue JSON
bodies on these names."""

from __future__ import annotations

from typing import Any

from pinlater.retry import RetryPolicy
from tasks.hbase import PRIMARY, STANDBY

FANOUT = "feed_fanout"
FOLLOW = "feed_follow"
WRITE_PRIMARY = "feed_write_primary"
WRITE_STANDBY = "feed_write_standby"
TRIM = "feed_trim"
TRIM_SWEEP = "feed_trim_sweep"

WRITE = {PRIMARY: WRITE_PRIMARY, STANDBY: WRITE_STANDBY}
ALL = (FANOUT, FOLLOW, WRITE_PRIMARY, WRITE_STANDBY, TRIM, TRIM_SWEEP)

# A write is retried until its cluster is back: 1 s, 2 s ... 5 s, then
# doubling up to 5 minutes, 500 times (about 40 hours of outage) before an
# operator has to retry-failed it.
WRITE_RETRY = RetryPolicy(
    kind="linear_then_exponential", retries=500, base_ms=1000, linear_retries=5, max_delay_ms=300_000
)
# Reads of MySQL or HBase and enqueues: the same shape, fewer tries.
JOB_RETRY = RetryPolicy(
    kind="linear_then_exponential", retries=50, base_ms=1000, linear_retries=5, max_delay_ms=300_000
)
# A page of 1,000 followers or a 10,000-cell write takes well under a
# second; a minute leaves room for a slow cluster before the claim lapses.
CLAIM_TIMEOUT_MS = 60_000

# At most this many writes of one cluster's queue run at once, over every
# worker: when a cluster slows down, its writes wait in PENDING (where a
# retry, a priority or an operator can still act on them) rather than pile
# up in workers' hands as RUNNING, each holding a connection to the slow
# cluster and a claim that may lapse. 16 puts in flight keep a region
# server's handlers busy without queueing in them; operators turn it with
# ``pinlater set-concurrency``.
WRITE_MAX_RUNNING = 16

RETRY = {FANOUT: JOB_RETRY, FOLLOW: JOB_RETRY, WRITE_PRIMARY: WRITE_RETRY, WRITE_STANDBY: WRITE_RETRY,
         TRIM: JOB_RETRY, TRIM_SWEEP: JOB_RETRY}


def create_options(queue: str) -> dict[str, Any]:
    """``create_queue`` keyword arguments of a feed queue."""
    options: dict[str, Any] = {"retry": RETRY[queue], "claim_timeout_ms": CLAIM_TIMEOUT_MS}
    if queue in (WRITE_PRIMARY, WRITE_STANDBY):
        options["max_running"] = WRITE_MAX_RUNNING
    return options
