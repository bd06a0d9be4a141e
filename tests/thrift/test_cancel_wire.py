"""Cancel through ``pinlater server`` (``cancelJobs``, and the
``cancelled`` field of ``checkpointJobsWithResult``): the same outcomes as
in-process, against every backend the thrift suite runs."""

from __future__ import annotations

import pytest

from pinlater import CANCELLED_STATUS, Ack, Checkpoint, Job, JobState
from pinlater.errors import PinLaterError
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient


def test_cancel_over_the_wire(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    first, second, third = client.enqueue(queue_name, [Job(b"a"), Job(b"b"), Job(b"c")])
    [job] = client.dequeue(queue_name, 1)
    pending = [d for d in (first, second, third) if d != job.descriptor]
    shard = service.operators.shard_ids()[0]
    unknown = f"{queue_name}:s{shard}:p1:999999"

    result = client.cancel(queue_name, [*pending, job.descriptor, unknown])
    assert sorted(result.cancelled) == sorted(pending)
    assert (result.interrupted, result.unknown, result.finished, result.unapplied) == (
        [job.descriptor], [unknown], [], {})
    beat = client.checkpoint(queue_name, [Checkpoint(job.descriptor, claim=job.claim)])
    assert beat.stale == [job.descriptor] and beat.cancelled == [job.descriptor]
    assert client.ack(queue_name, succeeded=[Ack(job.descriptor, claim=job.claim)]).stale == [job.descriptor]
    for d in (*pending, job.descriptor):
        info = service.lookup([d])[d]
        assert info.state is JobState.FAILED and info.custom_status.endswith(CANCELLED_STATUS)
    assert client.cancel(queue_name, [first]).finished == [first]
    assert client.dequeue(queue_name, 10) == []


def test_bad_cancels_over_the_wire_are_refused_in_one_line(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    with pytest.raises(PinLaterError, match="malformed") as info:
        client.cancel(queue_name, ["nope"])
    assert "\n" not in str(info.value)
    with pytest.raises(PinLaterError, match="not in queue"):
        client.cancel(queue_name, ["other:s1:p1:1"])
