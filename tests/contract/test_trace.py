"""A job's trace context is stored with it and comes back with every claim
of it, on every setup: what lets a run continue the trace of the request
that enqueued it, however late and on whatever worker. A claim also says
since when the job was runnable (its queue wait)."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Checkpoint, Job, JobService
from pinlater.errors import EnqueueRejected
from pinlater.models import DequeuedJob

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def _next(cluster: JobService, queue: str) -> DequeuedJob:
    """The one job of the queue, once it is runnable again."""
    deadline = time.monotonic() + 10
    while not (jobs := cluster.dequeue(queue, 10)):
        assert time.monotonic() < deadline, "the job did not become runnable again"
        time.sleep(0.02)
    [job] = jobs
    return job


def test_a_job_keeps_its_trace_through_retries_and_checkpoints(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    [traced, other, plain] = cluster.enqueue(queue_name, [
        Job(b"traced", custom_status="with a status", trace=TRACE),
        Job(b"other", priority=2, trace=OTHER),
        Job(b"plain"),
    ])  # fmt: skip
    got = {j.descriptor: j for j in cluster.dequeue(queue_name, 10)}
    assert {d: (j.body, j.trace) for d, j in got.items()} == {
        traced: (b"traced", TRACE), other: (b"other", OTHER), plain: (b"plain", None),
    }
    info = cluster.lookup([traced])[traced]
    assert got[traced].run_after_ms == info.run_after_ms  # runnable since its enqueue
    assert info.custom_status == "with a status"

    # A failure with a retry, then a checkpoint back to pending with a new body.
    cluster.ack(queue_name, failed=[Ack(traced, retry_delay_ms=1)], succeeded=[Ack(other), Ack(plain)])
    again = _next(cluster, queue_name)
    assert (again.descriptor, again.body, again.trace) == (traced, b"traced", TRACE)
    first_runnable = got[traced].run_after_ms
    assert again.run_after_ms is not None and first_runnable is not None and again.run_after_ms >= first_runnable
    assert not cluster.checkpoint(queue_name, [Checkpoint(traced, new_body=b"next", move_to_pending=True)]).stale
    third = _next(cluster, queue_name)
    assert (third.body, third.trace) == (b"next", TRACE)


@pytest.mark.parametrize("bad", [
    "", "not a trace", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", TRACE.upper(),
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    TRACE + "-extra", "x" * 10_000, b"00-bytes",
])  # fmt: skip
def test_a_bad_trace_is_refused_in_one_line_and_nothing_is_stored(
    cluster: JobService, queue_name: str, bad: object
) -> None:
    cluster.create_queue(queue_name)
    with pytest.raises(EnqueueRejected) as caught:
        cluster.enqueue(queue_name, [Job(b"fine"), Job(b"bad", trace=bad)])  # type: ignore[arg-type]
    message = str(caught.value)
    assert "trace must be a W3C traceparent" in message and "\n" not in message and len(message) < 200
    assert cluster.dequeue(queue_name, 10) == []
