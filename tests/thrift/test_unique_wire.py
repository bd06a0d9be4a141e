"""Unique jobs through ``pinlater server``: the job's ``unique`` field
(102) and the reply's ``duplicates`` (100) give the same outcomes as
in-process; a stock client's reply still has every descriptor; the
queue's unique period is set over the wire; bad keys are refused in one
line."""

from __future__ import annotations

import pytest

from pinlater import Ack, Job
from pinlater.errors import EnqueueRejected, PinLaterError
from pinlater.service import JobService
from pinlater.thrift import idl
from pinlater.thrift.client import ThriftClient


def test_duplicates_over_the_wire(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    first = client.enqueue(queue_name, [Job(b"a", unique="acct:1"), Job(b"b")])
    assert first.duplicates == ()
    again = client.enqueue(queue_name, [Job(b"c"), Job(b"d", unique="acct:1"), Job(b"e", unique="acct:1")])
    assert again.duplicates == (1, 2) and again[1] == again[2] == first[0]
    # In-process sees the same holder.
    assert service.enqueue(queue_name, [Job(b"f", unique="acct:1")]) == [first[0]]
    jobs = {j.descriptor: j for j in client.dequeue(queue_name, 10)}
    client.ack(queue_name, succeeded=[Ack(d, claim=j.claim) for d, j in jobs.items()])
    assert client.enqueue(queue_name, [Job(b"g", unique="acct:1")]).duplicates == ()


def test_the_unique_period_is_set_over_the_wire(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    assert client.update_queue(queue_name, unique_succeeded_ms=5000).unique_succeeded_ms == 5000
    assert client.queue_config(queue_name, fresh=True).unique_succeeded_ms == 5000
    [d] = client.enqueue(queue_name, [Job(b"a", unique="u")])
    [job] = client.dequeue(queue_name, 1)
    client.ack(queue_name, succeeded=[Ack(d, claim=job.claim)])
    assert client.enqueue(queue_name, [Job(b"b", unique="u")]) == [d]
    # The client checks a change as the service does; the server, what any client sends.
    with pytest.raises(PinLaterError, match="unique_succeeded_ms must be from 0 to"):
        client.update_queue(queue_name, unique_succeeded_ms=-1)
    with pytest.raises(PinLaterError, match="uniqueSucceededMillis must be an integer between 0 and"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(),
                     update=idl.PinLaterQueueConfigUpdate(name=queue_name, uniqueSucceededMillis=-1))


def test_a_published_reply_holds_the_holders_descriptor(client: ThriftClient, queue_name: str) -> None:
    """A stock client reads PinLaterEnqueueResponse and skips field 100: it
    gets the holder's descriptor in place of the duplicate's."""
    client.create_queue(queue_name)
    first = client.enqueue(queue_name, [Job(b"a", unique="u")])
    reply = idl.PinLaterUniqueEnqueueResponse(jobDescriptors=[first[0]], duplicates=[0])
    assert [f[1] for f in idl.PinLaterEnqueueResponse.thrift_spec.values()] == ["jobDescriptors"]
    assert reply.jobDescriptors == list(first)


@pytest.mark.parametrize(
    ("unique", "message"),
    [("x" * 201, "job unique key is 201 bytes in UTF-8; the most is 200"), (b"\xff", "job unique key")],
)
def test_bad_unique_keys_over_the_wire(client: ThriftClient, queue_name: str, unique: object, message: str) -> None:
    client.create_queue(queue_name)
    job = idl.PinLaterTracedJob(body=b"x", unique=unique)
    with pytest.raises(PinLaterError, match=message) as info:
        client._call("enqueueJobs", idempotent=False, context=client._context(),
                     request=idl.PinLaterEnqueueRequest(queueName=queue_name, jobs=[job]))
    assert "\n" not in str(info.value)
    assert client.count(queue_name, "pending") == 0


@pytest.mark.parametrize("field", ["unique", "key"])
def test_a_key_the_wire_cannot_carry_is_refused_as_in_process(
    client: ThriftClient, service: JobService, queue_name: str, field: str
) -> None:
    """A lone surrogate cannot be written as UTF-8: the Thrift client
    refuses it as the service does, not with its codec's error."""
    client.create_queue(queue_name)
    job = Job(b"x", **{field: "\ud800"})  # type: ignore[arg-type]
    for caller in (client, service):
        with pytest.raises(EnqueueRejected, match="lone surrogate"):
            caller.enqueue(queue_name, [job])
    assert client.count(queue_name, "pending") == 0
