"""The service's input limits hold on the wire too: the same refusals, with
the wire's error codes, as in-process (tests/contract/test_limits.py)."""

from __future__ import annotations

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.errors import EnqueueRejected, ErrorCode, PinLaterError
from pinlater.limits import MAX_TIMESTAMP_MS
from pinlater.thrift.client import ThriftClient

I64_MAX = 2**63 - 1  # Java's Long.MAX_VALUE, the largest run_after the wire can carry


@pytest.mark.parametrize("run_after", [I64_MAX, MAX_TIMESTAMP_MS + 1, -1])
def test_run_after_out_of_range_is_refused_on_the_wire(
    client: ThriftClient, service: JobService, queue_name: str, run_after: int
) -> None:
    service.create_queue(queue_name)
    with pytest.raises(EnqueueRejected) as info:
        client.enqueue(queue_name, [Job(b"ok"), Job(b"never", run_after_ms=run_after)])
    assert info.value.code is ErrorCode.ENQUEUE_REJECTED
    assert "run_after must be milliseconds since the epoch" in info.value.message
    assert service.count(queue_name, "pending", future=True) + service.count(queue_name, "pending") == 0
    [descriptor] = client.enqueue(queue_name, [Job(b"latest", run_after_ms=MAX_TIMESTAMP_MS)])
    assert client.lookup([descriptor])[descriptor].run_after_ms == MAX_TIMESTAMP_MS


def test_retry_delay_out_of_range_is_refused_on_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    service.create_queue(queue_name)
    client.enqueue(queue_name, [Job(b"x", attempts_allowed=3)])
    [job] = client.dequeue(queue_name, 1)
    for delay in (I64_MAX, -1):
        # InvalidRequest travels as UNKNOWN (500): the wire has no closer code.
        with pytest.raises(PinLaterError, match="retry delay must be 0 to"):
            client.ack(queue_name, failed=[Ack(job.descriptor, retry_delay_ms=delay)])
    assert service.lookup([job.descriptor])[job.descriptor].state is JobState.RUNNING


def test_jobs_per_enqueue_call_are_capped_on_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    service.create_queue(queue_name)
    cap = service.settings.max_jobs_per_call
    with pytest.raises(EnqueueRejected, match=f"{cap + 1} jobs in one call; the limit is {cap}"):
        client.enqueue(queue_name, [Job(b"j")] * (cap + 1))
    assert service.count(queue_name, "pending") == 0
