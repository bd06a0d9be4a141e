"""A concurrency cap through the wire: set, read and removed with
``updateQueueConfig``'s extension fields, kept by dequeues through the
server (its coalescer merges concurrent callers' dequeues and ACKs), and
bad caps refused in one line with nothing stored."""

from __future__ import annotations

import pytest

from pinlater import Ack, Checkpoint, Job, JobState
from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.service import JobService
from pinlater.thrift import idl
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.support.caps import most_running


def test_a_cap_is_set_read_and_removed_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    assert client.create_queue(queue_name, max_running=7).max_running == 7
    assert service.queue_config(queue_name, fresh=True).max_running == 7
    assert client.set_concurrency(queue_name, 2).max_running == 2
    assert client.queue_config(queue_name, fresh=True).max_running == 2
    assert client.set_concurrency(queue_name, None).max_running is None
    assert service.queue_config(queue_name, fresh=True).max_running is None


def test_dequeues_through_the_server_keep_the_cap(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name, max_running=2)
    client.enqueue(queue_name, [Job(b"x", attempts_allowed=3) for _ in range(6)])
    first = client.dequeue(queue_name, 5)
    assert len(first) == 2
    assert client.dequeue(queue_name, 5) == []
    client.checkpoint(queue_name, [Checkpoint(first[0].descriptor, move_to_pending=True)])
    [second] = client.dequeue(queue_name, 5)
    client.ack(queue_name, failed=[Ack(first[1].descriptor)])
    # The ACK riding along frees its slot before the dequeue takes slots.
    third = client.dequeue(queue_name, 5, succeeded=[Ack(second.descriptor)])
    assert len(third) == 2
    assert client.dequeue(queue_name, 5) == []
    assert service.count(queue_name, JobState.RUNNING) == 2
    client.ack(queue_name, succeeded=[Ack(third[0].descriptor)])
    assert len(client.dequeue(queue_name, 5)) == 1


def test_many_callers_through_the_server_never_hold_more_than_the_cap(
    server: ThriftServer, service: JobService, queue_name: str
) -> None:
    cap = 3
    service.create_queue(queue_name, max_running=cap)
    service.enqueue(queue_name, [Job(b"x") for _ in range(120)])
    done, most = most_running(
        lambda i: ThriftClient([f"127.0.0.1:{server.port}"], source=f"capped-{i}"), queue_name, 120, workers=8,
    )
    assert done == 120
    assert 1 <= most <= cap
    assert service.count(queue_name, JobState.SUCCEEDED) == 120


@pytest.mark.parametrize("bad", [0, -5, 1_000_001, 2**31 - 1])
def test_a_bad_cap_over_the_wire_is_refused_in_one_line(
    client: ThriftClient, service: JobService, queue_name: str, bad: int
) -> None:
    client.create_queue(queue_name, max_running=4)
    update = idl.PinLaterQueueConfigUpdate(name=queue_name, maxRunning=bad)
    with pytest.raises(PinLaterError, match="maxRunning must be an integer between 1 and 1000000") as info:
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=update)
    assert "\n" not in str(info.value)
    both = idl.PinLaterQueueConfigUpdate(name=queue_name, maxRunning=3, unlimitedRunning=True)
    with pytest.raises(PinLaterError, match="not both"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=both)
    with pytest.raises(PinLaterError, match="maxRunning"):
        client._call("createQueueWithConfig", idempotent=True, context=client._context(),
                     config=idl.PinLaterQueueConfig(name=f"{queue_name}_b", maxRunning=bad))
    # The client refuses what the wire's i32 could not carry, the same way.
    with pytest.raises(InvalidRequest, match="max_running must be a whole number"):
        client.set_concurrency(queue_name, 2**40)
    assert service.queue_config(queue_name, fresh=True).max_running == 4
    assert f"{queue_name}_b" not in service.queue_names()
