"""A fan-out page's writes, made by the page itself where that is safe.

A page's cells can reach a cluster two ways: a write job on the cluster's
queue (``tasks.feeds.writes``), or the page putting them itself. The job
costs about as much CPU again as the put (its body made and parsed, an
enqueue, the dequeues, an ACK, and a fence of its own; docs/benchmarks.md
has the profile), while the page's own puts share one fence for both
clusters. So a page puts its cells itself on each cluster whose write
queue runs freely (not paused, no rate limit, no write pending and due in
it: retries waiting for their time do not count) and that this process
has not seen fail lately, and each put must end within a deadline. A
cluster whose put fails or is late gets its write job as before, and this
process queues that cluster's writes for ``BACKOFF_S`` after, then tries
once more. So an outage or a slowdown of one cluster still backs up only its
own queue, where its cap, pause and rate hold the work; and no page writes
past them. Direct writes in flight are at most the running fan-out pages,
one each.

Both ways write the same cells (the version rule of ``tasks.feeds.writes``):
the puts, then the fence (the follows read again after the puts, the gone
ones retracted). Each step is idempotent, so a page run again after a crash
at any point, or a write job queued after a direct put did land, changes
nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pinlater.client_api import PinLaterClient
from pinlater.errors import PinLaterError
from tasks.appdata.errors import AppDataError
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tasks.feeds.cells import TABLE
from tasks.feeds.writes import WriteBody, fence_rows, retract, row_cells
from tasks.hbase import ClusterPair, HBaseError, put_versions
from tasks.hbase.thrift2 import within

log = logging.getLogger(__name__)

# After a failed or late direct write, this process queues the cluster's
# writes this long: a cluster that is down or slow is asked once in that
# time, not once a page.
BACKOFF_S = 10.0
# How long a queue's state (paused, rate, writes due) is taken as read.
QUEUE_CHECK_S = 1.0


@dataclass
class DirectWrites:
    """This process's choice, per cluster, between a direct put and a write job."""

    deadline_s: float  # a direct put ends within this; 0: never write directly
    clock: Callable[[], float] = time.monotonic
    _backoff: dict[str, float] = field(default_factory=dict)  # cluster: monotonic time it ends
    _queue_free: dict[str, tuple[bool, float]] = field(default_factory=dict)  # cluster: (answer, until)

    def write(self, ready: Callable[[str], ClusterPair], store: AppData, client: PinLaterClient,
              writes: Sequence[WriteBody]) -> list[WriteBody]:
        """Writes what it can of ``writes`` (one body per cluster, the same
        rows and columns); the bodies left for write jobs."""
        if self.deadline_s <= 0 or not writes:
            return list(writes)
        now = self.clock()
        chosen = [body for body in writes if self._backoff.get(body.cluster, 0.0) <= now
                  and self._free(client, body.cluster, now)]
        if not chosen:
            return list(writes)
        done, failed = put_all(ready, store, chosen, self.deadline_s)
        until = self.clock() + BACKOFF_S
        for cluster in failed:
            self._backoff[cluster] = until
        return [body for body in writes if body.cluster not in done]

    def _free(self, client: PinLaterClient, cluster: str, now: float) -> bool:
        """Whether ``cluster``'s write queue runs freely: not paused, no rate
        limit, no job pending and due (read at most once a ``QUEUE_CHECK_S``)."""
        answer, until = self._queue_free.get(cluster, (False, 0.0))
        if now < until:
            return answer
        queue = queues.WRITE[cluster]
        try:
            config = client.queue_config(queue)
            answer = not config.paused and config.max_dequeue_rate is None and client.count(queue, "pending") == 0
        except PinLaterError as exc:  # the job service will say so again when the page queues its writes
            log.info("feeds.fanout: %s's writes go through their queue: its state cannot be read: %s", cluster, exc)
            answer = False
        self._queue_free[cluster] = (answer, now + QUEUE_CHECK_S)
        return answer


def put_all(ready: Callable[[str], ClusterPair], store: AppData, writes: Sequence[WriteBody], deadline_s: float
            ) -> tuple[set[str], set[str]]:
    """Puts ``writes`` (puts of the same rows and columns, one per cluster),
    each within ``deadline_s``, then fences them once. The clusters fully
    written (puts and retractions), and those whose HBase failed or was
    late. A fence that cannot read MySQL writes none fully: their write
    jobs fence for themselves."""
    first = writes[0]
    if len({body.cluster for body in writes}) != len(writes) or any(
            body.op != "put" or body.rows != first.rows or body.columns != first.columns
            or body.followee != first.followee for body in writes):
        raise ValueError("put_all: the bodies must be the same put, one per cluster")
    cells = row_cells(first.rows, [q.encode("ascii") for q in first.columns])
    put: list[str] = []
    failed: set[str] = set()
    for body in writes:
        try:
            pair = ready(body.cluster)
            with within(deadline_s):
                put_versions(pair[body.cluster], TABLE, cells)
            put.append(body.cluster)
        except HBaseError:
            failed.add(body.cluster)
    if not put:
        return set(), failed
    try:
        gone = fence_rows(store, first.followee, first.rows)
    except AppDataError:
        return set(), failed
    done: set[str] = set()
    for cluster in put:
        try:
            if gone:
                with within(deadline_s):
                    retract(ready(cluster)[cluster], gone)
            done.add(cluster)
        except HBaseError:
            failed.add(cluster)
    return done, failed
