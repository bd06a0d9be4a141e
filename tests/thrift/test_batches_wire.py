"""Batches through ``pinlater server`` (``createBatch``, ``sealBatch``,
``getBatch``, ``cancelBatch``, and the enqueue request's ``batch``): the
same outcomes as in-process; bad ids refused in one line."""

from __future__ import annotations

import pytest

from pinlater import Ack, Job
from pinlater.errors import PinLaterError
from pinlater.models import new_batch_id
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient


def test_a_batch_over_the_wire(client: ThriftClient, service: JobService, queue_name: str) -> None:
    done_q = queue_name + "_done"
    client.create_queue(queue_name)
    client.create_queue(done_q)
    chosen = new_batch_id(done_q)
    batch = client.create_batch(done_q, Job(b"callback"), description="wire", batch=chosen)
    assert batch == chosen
    stored = client.enqueue(queue_name, [Job(b"a"), Job(b"b")], batch=batch)
    status = client.seal_batch(batch)
    assert (status.state, status.total, status.description) == ("sealed", 2, "wire")
    jobs = client.dequeue(queue_name, 10)
    assert sorted(j.descriptor for j in jobs) == sorted(stored)
    client.ack(queue_name, succeeded=[Ack(jobs[0].descriptor, claim=jobs[0].claim)],
               failed=[Ack(jobs[1].descriptor, claim=jobs[1].claim)])
    # The second has retries left: it is pending again, not ended.
    assert client.batch_status(batch).pending == 1
    assert service.cancel_batch(batch).cancelled == [jobs[1].descriptor, status.callback]
    assert client.batch_status(batch).state == "cancelled"
    with pytest.raises(PinLaterError, match="there is a batch"):
        client.create_batch(done_q, Job(b"again"), batch=chosen)


def test_a_released_callback_over_the_wire(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    batch = client.create_batch(queue_name, Job(b"callback"))
    assert client.seal_batch(batch).state == "released"
    [job] = client.dequeue(queue_name, 5)
    assert job.body == b"callback"
    assert client.cancel_batch(batch).finished == []


@pytest.mark.parametrize("batch", ["nope", "q.b" + "0" * 25])
def test_bad_batch_ids_over_the_wire(client: ThriftClient, queue_name: str, batch: str) -> None:
    client.create_queue(queue_name)
    for call in (lambda: client.batch_status(batch), lambda: client.seal_batch(batch),
                 lambda: client.enqueue(queue_name, [Job(b"x")], batch=batch)):
        with pytest.raises(PinLaterError, match="batch must be a batch id") as info:
            call()
        assert "\n" not in str(info.value)
    assert client.count(queue_name, "pending") == 0


def test_an_idempotent_enqueue_sent_again_over_the_wire_joins_no_other_batch(
    client: ThriftClient, queue_name: str
) -> None:
    done_q = queue_name + "_done"
    client.create_queue(queue_name)
    client.create_queue(done_q)
    first, other = client.create_batch(done_q, Job(b"first")), client.create_batch(done_q, Job(b"other"))
    stored = client.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=first)
    assert client.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=other) == stored
    assert (client.batch_status(first).total, client.batch_status(other).total) == (2, 0)
