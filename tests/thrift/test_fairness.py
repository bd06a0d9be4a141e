"""Fairness keys through the wire: the job's extension field carries its
key in both directions (enqueue and lookup), dequeues through the server
serve keys in turn, and bad keys are refused in one line with nothing
stored."""

from __future__ import annotations

import pytest

from pinlater import Job, JobState
from pinlater.errors import PinLaterError
from pinlater.limits import MAX_KEY_BYTES
from pinlater.service import JobService
from pinlater.thrift import idl
from pinlater.thrift.client import ThriftClient


def test_keys_cross_the_wire_and_dequeues_through_the_server_take_them_in_turn(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    big = client.enqueue(queue_name, [Job(b"a", key="tenant-a") for _ in range(30)])
    small = client.enqueue(queue_name, [Job(b"b", key="tenant-ß") for _ in range(3)])
    assert {i.key for i in service.lookup(big + small).values()} == {"tenant-a", "tenant-ß"}
    assert client.lookup(small)[small[0]].key == "tenant-ß"
    got = client.dequeue(queue_name, 6)
    assert [j.body for j in got] == [b"a", b"b"] * 3


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * (MAX_KEY_BYTES + 1), "job key is 65 bytes in UTF-8; the most is 64"),
        (b"\xff\xfe", "job key must be text, got a bytes"),
    ],
)
def test_a_bad_key_over_the_wire_is_refused_in_one_line(
    client: ThriftClient, service: JobService, queue_name: str, key: object, message: str
) -> None:
    client.create_queue(queue_name)
    jobs = [idl.PinLaterTracedJob(body=b"fine", key="ok"), idl.PinLaterTracedJob(body=b"bad", key=key)]
    request = idl.PinLaterEnqueueRequest(queueName=queue_name, jobs=jobs)
    with pytest.raises(PinLaterError) as refused:
        client._call("enqueueJobs", idempotent=False, context=client._context(), request=request)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    assert service.count(queue_name, JobState.PENDING) == 0
