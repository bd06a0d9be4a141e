"""Per-key rates through ``pinlater server``: set, read and removed over
the wire (``updateQueueConfig``'s extension fields), held for dequeues
through the server, and a bad one refused in one line with nothing
stored."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from pinlater import Ack, Job
from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.service import JobService
from pinlater.thrift import idl
from pinlater.thrift.client import ThriftClient


def test_a_key_rate_is_set_read_and_removed_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    assert client.set_key_rate(queue_name, 2.5).key_rate == 2.5
    assert service.queue_config(queue_name, fresh=True).key_rate == 2.5
    assert client.queue_config(queue_name, fresh=True).key_rate == 2.5
    assert client.set_key_rate(queue_name, None).key_rate is None
    assert service.queue_config(queue_name, fresh=True).key_rate is None


def test_dequeues_through_the_server_keep_the_key_rate(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    client.set_key_rate(queue_name, 0.001)  # each key's bucket holds the one job it starts full with
    client.enqueue(queue_name, [Job(b"a", key="A") for _ in range(10)] + [Job(b"b", key="B") for _ in range(10)]
                   + [Job(b"-") for _ in range(3)])
    taken = []
    for _ in range(3):
        taken += client.dequeue(queue_name, 50)
    assert Counter(j.body for j in taken) == Counter({b"a": 1, b"b": 1, b"-": 3})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0, 1e10])
def test_a_bad_key_rate_over_the_wire_is_refused_in_one_line(
    client: ThriftClient, service: JobService, queue_name: str, bad: float
) -> None:
    client.create_queue(queue_name)
    client.set_key_rate(queue_name, 4.0)
    update = idl.PinLaterQueueConfigUpdate(name=queue_name, keyRate=bad)
    with pytest.raises(PinLaterError, match="keyRate: key_rate must be a finite number") as info:
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=update)
    assert "\n" not in str(info.value)
    both = idl.PinLaterQueueConfigUpdate(name=queue_name, keyRate=3.0, unlimitedKeyRate=True)
    with pytest.raises(PinLaterError, match="not both"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=both)
    with pytest.raises(PinLaterError, match="keyRate"):
        client._call("createQueueWithConfig", idempotent=True, context=client._context(),
                     config=idl.PinLaterQueueConfig(name=f"{queue_name}_b", keyRate=2.0))
    # The client refuses it before sending, the same way.
    with pytest.raises(InvalidRequest, match="key_rate must be a finite number"):
        client.set_key_rate(queue_name, bad)
    assert service.queue_config(queue_name, fresh=True).key_rate == 4.0
    assert f"{queue_name}_b" not in service.queue_names()


def test_a_key_cap_is_set_read_and_removed_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    assert client.set_key_concurrency(queue_name, 3).key_max_running == 3
    assert service.queue_config(queue_name, fresh=True).key_max_running == 3
    assert client.queue_config(queue_name, fresh=True).key_max_running == 3
    assert client.set_key_concurrency(queue_name, None).key_max_running is None
    assert service.queue_config(queue_name, fresh=True).key_max_running is None


def test_dequeues_through_the_server_keep_the_key_cap(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    client.set_key_concurrency(queue_name, 2)
    client.enqueue(queue_name, [Job(b"a", key="A") for _ in range(6)] + [Job(b"-") for _ in range(2)])
    first = client.dequeue(queue_name, 50)
    assert Counter(j.body for j in first) == Counter({b"a": 2, b"-": 2})
    assert client.dequeue(queue_name, 50) == []
    # A stock client's ACK, without the claim: the server finds the job's.
    a = [j for j in first if j.body == b"a"]
    client.ack(queue_name, succeeded=[Ack(a[0].descriptor)])
    assert Counter(j.body for j in client.dequeue(queue_name, 50)) == Counter({b"a": 1})


@pytest.mark.parametrize("bad", [0, -5, 1_000_001])
def test_a_bad_key_cap_over_the_wire_is_refused_in_one_line(
    client: ThriftClient, service: JobService, queue_name: str, bad: int
) -> None:
    client.create_queue(queue_name)
    client.set_key_concurrency(queue_name, 4)
    update = idl.PinLaterQueueConfigUpdate(name=queue_name, keyMaxRunning=bad)
    with pytest.raises(PinLaterError, match="keyMaxRunning must be an integer between 1 and 1000000") as info:
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=update)
    assert "\n" not in str(info.value)
    both = idl.PinLaterQueueConfigUpdate(name=queue_name, keyMaxRunning=3, unlimitedKeyRunning=True)
    with pytest.raises(PinLaterError, match="not both"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=both)
    with pytest.raises(InvalidRequest, match="key_max_running must be a whole number"):
        client.set_key_concurrency(queue_name, 2**40)
    assert service.queue_config(queue_name, fresh=True).key_max_running == 4
