"""Claims through a running server, with the Python Thrift client, on
memory, Redis and MySQL: the dequeue reply carries each job's claim (an
extension field of its metadata), an ACK or checkpoint that gives it back
(an extension field of PinLaterJobAckInfo and PinLaterCheckpointJobRequest)
applies only to that claim, and lookups show a claim's source, never its
token. A stock client, which sends no claims, keeps the source check
(tests/thrift/test_apache_client.py)."""

from __future__ import annotations

import re

import pytest

from pinlater import Ack, Checkpoint, Job, JobState
from pinlater.errors import PinLaterError
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from tests.support.claims import claimed_again_after_timeout

CLAIM = re.compile(r"[0-9a-f]{16}@test-worker-a")


def test_dequeued_jobs_carry_their_claim_and_lookups_show_only_its_source(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    client.create_queue(queue_name)
    [d] = client.enqueue(queue_name, [Job(b"body")])
    [peeked] = client.dequeue(queue_name, 1, dry_run=True)
    assert peeked.claim == ""
    [job] = client.dequeue(queue_name, 1)
    assert CLAIM.fullmatch(job.claim)
    token = job.claim.split("@", 1)[0]
    remote, local = client.lookup([d])[d], service.lookup([d])[d]
    assert remote.claim == local.claim == "test-worker-a"
    [scanned] = client.scan(queue_name, JobState.RUNNING).jobs
    assert scanned.claim == "test-worker-a" and token not in repr((remote, scanned))


def test_a_late_ack_of_a_timed_out_run_is_stale_for_the_same_source(
    client: ThriftClient, other_client: ThriftClient, service: JobService, queue_name: str
) -> None:
    first, second = claimed_again_after_timeout(client, service.operators, queue_name)
    assert CLAIM.fullmatch(first.claim) and CLAIM.fullmatch(second.claim) and first.claim != second.claim
    d = first.descriptor
    before = service.lookup([d], include_body=True)[d]
    assert client.ack(queue_name, failed=[Ack(d, "late", retry_delay_ms=5, claim=first.claim)]).stale == [d]
    assert client.ack(queue_name, succeeded=[Ack(d, claim=first.claim)]).stale == [d]
    late = [Checkpoint(d, new_body=b"late", move_to_pending=True, claim=first.claim)]
    assert client.checkpoint(queue_name, late).stale == [d]
    # A copied source with a made-up token is stale too, from any caller.
    forged = "0123456789abcdef@test-worker-a"
    assert other_client.ack(queue_name, succeeded=[Ack(d, claim=forged)]).stale == [d]
    assert client.checkpoint(queue_name, [Checkpoint(d, claim=forged)]).stale == [d]
    assert service.lookup([d], include_body=True)[d] == before
    # The live claim applies, whoever sends it; riding on a dequeue too.
    assert other_client.checkpoint(queue_name, [Checkpoint(d, prepend_custom_status="beat;",
                                                           claim=second.claim)]).acked == [d]
    client.dequeue(queue_name, 1, succeeded=[Ack(d, "done", claim=second.claim)])
    info = service.lookup([d])[d]
    assert (info.state, info.attempts_remaining, info.custom_status) == (JobState.SUCCEEDED, 4, "beat;done")


def test_without_a_claim_the_source_decides_over_the_wire(
    client: ThriftClient, other_client: ThriftClient, queue_name: str
) -> None:
    client.create_queue(queue_name)
    [d] = client.enqueue(queue_name, [Job(b"body")])
    client.dequeue(queue_name, 1)
    assert other_client.ack(queue_name, succeeded=[Ack(d)]).stale == [d]
    assert client.checkpoint(queue_name, [Checkpoint(d)]).acked == [d]
    assert client.ack(queue_name, succeeded=[Ack(d)]).acked == [d]


@pytest.mark.parametrize("claim", ["nope", "0123456789abcdeF@test-worker-a", "0123456789abcdef@"])
def test_a_malformed_claim_is_refused_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str, claim: str
) -> None:
    client.create_queue(queue_name)
    [d] = client.enqueue(queue_name, [Job(b"body")])
    client.dequeue(queue_name, 1)
    # InvalidRequest in the server: UNKNOWN on the wire, as every refused input.
    with pytest.raises(PinLaterError, match="claim must be a dequeued job's claim") as acked:
        client.ack(queue_name, succeeded=[Ack(d, claim=claim)])
    with pytest.raises(PinLaterError, match="claim must be a dequeued job's claim") as checked:
        client.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True, claim=claim)])
    for raised in (acked, checked):
        assert "\n" not in str(raised.value) and claim[:16] not in str(raised.value)
    assert service.lookup([d])[d].state is JobState.RUNNING
