"""A job claimed twice by one source: its first claim timed out (the monitor
put it back) and the same source claimed it again. Through any client."""

from __future__ import annotations

import time

from pinlater import Job
from pinlater.client_api import PinLaterClient
from pinlater.models import DequeuedJob
from pinlater.operators import Monitor, Operators


def claimed_again_after_timeout(
    client: PinLaterClient, operators: Operators, queue: str
) -> tuple[DequeuedJob, DequeuedJob]:
    """The two dequeues of one job in ``queue`` (made here, 200 ms claims)."""
    client.create_queue(queue, claim_timeout_ms=200)
    client.enqueue(queue, [Job(b"body", attempts_allowed=5)])
    [first] = client.dequeue(queue, 1)
    monitor = Monitor(operators, queues=[queue])
    deadline = time.monotonic() + 10
    while monitor.run_once().claims_repended == 0:
        assert time.monotonic() < deadline, "the claim did not time out"
        time.sleep(0.05)
    [second] = client.dequeue(queue, 1)
    assert second.descriptor == first.descriptor
    return first, second
