"""Every wire method through a running server, with the Python Thrift client,
against the memory, Redis and MySQL backends."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from pinlater import CONTINUATION_END, Ack, Checkpoint, Job, JobState, PinLaterError, errors
from pinlater.errors import (
    ContinuationInvalid,
    DequeueRateLimited,
    EnqueueRejected,
    ErrorCode,
    PasswordInvalid,
    PriorityNotSupported,
    QueueNameInvalid,
    QueueNameTooLong,
    QueueNotFound,
)
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.thrift.conftest import make_service


def test_queue_admin(client: ThriftClient, queue_name: str) -> None:
    config = client.create_queue(queue_name)
    assert config.name == queue_name
    client.create_queue(queue_name)  # idempotent
    assert queue_name in client.queue_names()
    assert isinstance(client.queue_names(), set)
    with pytest.raises(PasswordInvalid):
        client.delete_queue(queue_name, "wrong")
    with pytest.raises(PasswordInvalid):
        client.delete_queue(queue_name, None)
    client.delete_queue(queue_name, "secret")
    client.delete_queue(queue_name, "secret")  # idempotent
    assert queue_name not in client.queue_names()
    with pytest.raises(QueueNameInvalid):
        client.create_queue("bad-name!")
    with pytest.raises(QueueNameTooLong):
        client.create_queue("q" * 80)
    with pytest.raises(QueueNotFound, match="does not exist"):
        client.enqueue(queue_name, [Job(b"x")])
    # Queue options travel in the createQueueWithConfig extension.
    assert client.create_queue(queue_name, priorities=5).priorities == 5


def test_a_name_with_a_trailing_newline_is_refused_in_process_and_on_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    # "^...$" with re.match lets "q\n" through: such a queue's descriptors
    # never parse again, so its jobs could never be ACKed.
    service.create_queue(queue_name)
    for caller in (service, client):
        for name in (queue_name + "\n", "q\n"):
            with pytest.raises(QueueNameInvalid) as refused:
                caller.create_queue(name)
            assert refused.value.message == f"queue name {name!r} is invalid: use letters, digits and underscore only"
            assert "\n" not in refused.value.message
            with pytest.raises(QueueNameInvalid):
                caller.enqueue(name, [Job(b"x")])
        with pytest.raises(PinLaterError, match="malformed job descriptor"):
            caller.lookup([f"{queue_name}:sr1:p1:1\n"])
        with pytest.raises(ContinuationInvalid):
            caller.scan(queue_name, "pending", continuation="1:r1:1:1\n")
    assert not {n for n in service.queue_names() if n.startswith("q\n") or n.endswith("\n")}


def test_a_queue_deleted_by_another_process_takes_no_more_jobs_through_the_server(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    # The server's config cache still holds the queue when an operator's
    # process (its own cache) deletes it: the next enqueue is refused and
    # stores nothing on any shard.
    operator = JobService(service.core.sibling(), source="operator")
    operator.create_queue(queue_name)
    client.enqueue(queue_name, [Job(b"before")])
    operator.delete_queue(queue_name, "secret")
    with pytest.raises(QueueNotFound, match="was deleted"):
        client.enqueue(queue_name, [Job(b"after")])
    assert all(queue_name not in shard.queue_names() for shard in service.core.shards.all())
    operator.create_queue(queue_name)
    [descriptor] = client.enqueue(queue_name, [Job(b"again")])
    assert [j.descriptor for j in client.dequeue(queue_name, 5)] == [descriptor]


def test_enqueue_dequeue_ack(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    low, high = client.enqueue(queue_name, [Job(b"low", priority=2), Job(b"high", priority=1, attempts_allowed=3)])
    assert low.startswith(f"{queue_name}:s") and ":p2:" in low and ":p1:" in high
    later = service.operators.shard_now_ms() + 600_000
    [future] = client.enqueue(queue_name, [Job(b"future", run_after_ms=later)])

    jobs = client.dequeue(queue_name, 10)
    assert [j.descriptor for j in jobs] == [high, low]  # priority first; the future job waits
    assert [j.body for j in jobs] == [b"high", b"low"]
    assert (jobs[0].attempts_allowed, jobs[0].attempts_remaining) == (3, 3)
    assert jobs[1].attempts_allowed == service.queue_config(queue_name).retry.attempts_allowed

    info = client.lookup([high])[high]
    assert info.state is JobState.RUNNING
    assert info.claim == "test-worker-a"  # RequestContext.source: lookups show the holder, never the token

    result = client.ack(queue_name, succeeded=[Ack(high, append_custom_status="done")],
                        failed=[Ack(low, "oops", retry_delay_ms=600_000)])
    assert sorted(result.acked) == sorted([high, low])
    found = client.lookup([high, low, future])
    assert found[high].state is JobState.SUCCEEDED and found[high].custom_status.endswith("done")
    assert found[low].state is JobState.PENDING and found[low].run_after_ms > time.time() * 1000 + 500_000
    assert found[future].state is JobState.PENDING
    assert client.count(queue_name, "pending", future=True) == 2
    assert client.count(queue_name, JobState.SUCCEEDED) == 1
    assert client.dequeue(queue_name, 10) == []


def test_acks_and_checkpoints_honour_the_claim_source(
    client: ThriftClient, other_client: ThriftClient, queue_name: str
) -> None:
    client.create_queue(queue_name)
    [d] = client.enqueue(queue_name, [Job(b"v1")])
    [job] = client.dequeue(queue_name, 1)
    # Another source: no effect (stale), whatever it sends.
    other_client.checkpoint(queue_name, [Checkpoint(d, new_body=b"hijack")])
    other_client.ack(queue_name, succeeded=[Ack(d)])
    info = client.lookup([d], include_body=True)[d]
    assert (info.state, info.body) == (JobState.RUNNING, b"v1")
    # The claim holder: applied.
    client.checkpoint(queue_name, [Checkpoint(d, new_body=b"v2", prepend_custom_status="step1 ")])
    info = client.lookup([d], include_body=True)[d]
    assert (info.state, info.body) == (JobState.RUNNING, b"v2")
    assert info.custom_status.startswith("step1")
    client.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True)])
    assert client.lookup([d])[d].state is JobState.PENDING
    # An explicit source on the call wins over the client's.
    [job] = other_client.dequeue(queue_name, 1)
    client.ack(queue_name, succeeded=[Ack(job.descriptor)], source="test-worker-b")
    assert client.lookup([d])[d].state is JobState.SUCCEEDED


def test_dry_run_and_acks_riding_on_dequeue(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    a, b = client.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    peeked = client.dequeue(queue_name, 5, dry_run=True)
    assert [j.descriptor for j in peeked] == [a, b]
    assert client.count(queue_name, "running") == 0
    [first] = client.dequeue(queue_name, 1)
    [second] = client.dequeue(queue_name, 1, succeeded=[Ack(first.descriptor)])
    assert {first.descriptor, second.descriptor} == {a, b}
    assert client.lookup([first.descriptor])[first.descriptor].state is JobState.SUCCEEDED
    assert client.dequeue(queue_name, 1, failed=[Ack(second.descriptor, retry_delay_ms=600_000)]) == []
    assert client.lookup([second.descriptor])[second.descriptor].state is JobState.PENDING


def test_lookup_count_and_scan(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    now = service.operators.shard_now_ms()
    ds = client.enqueue(queue_name, [Job(f"user:{i}".encode(), priority=1 + i % 2, run_after_ms=now - i * 1000)
                                     for i in range(7)])
    shard = service.operators.shard_ids()[0]
    unknown = f"{queue_name}:s{shard}:p1:999999"
    found = client.lookup([ds[0], unknown])
    assert list(found) == [ds[0]] and found[ds[0]].body is None
    assert client.lookup([ds[0]], include_body=True)[ds[0]].body == b"user:0"
    assert client.count(queue_name, "pending") == 7
    assert client.count(queue_name, "pending", priority=2) == 3
    assert client.count(queue_name, "pending", body_regex=r"user:[0-2]$") == 3

    page = client.scan(queue_name, "pending", limit=3)
    assert [j.descriptor for j in page.jobs] == ds[:3]  # newest run_after first
    assert all(j.body is None for j in page.jobs)
    rest = client.scan(queue_name, "pending", limit=10, continuation=page.continuation, include_body=True)
    assert [j.descriptor for j in rest.jobs] == ds[3:]
    assert [j.body for j in rest.jobs] == [f"user:{i}".encode() for i in range(3, 7)]
    assert rest.continuation == CONTINUATION_END
    assert [j.descriptor for j in client.scan(queue_name, "pending", priority=2).jobs] == ds[1::2]
    with pytest.raises(ContinuationInvalid):
        client.scan(queue_name, "pending", continuation="garbage")


def test_retry_failed_and_delete_jobs(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    ds = client.enqueue(queue_name, [Job(b"x", priority=p, attempts_allowed=1) for p in (1, 2, 3, 1)])
    jobs = client.dequeue(queue_name, 10)
    client.ack(queue_name, failed=[Ack(j.descriptor) for j in jobs])
    assert client.count(queue_name, "failed") == 4
    assert client.retry_failed(queue_name, priority=1, limit=1) == 1
    assert client.retry_failed(queue_name) == 3  # every priority
    assert client.count(queue_name, "failed") == 0
    assert client.count(queue_name, "pending") == 4
    assert client.delete_jobs(queue_name, "pending", priority=2) == 1
    assert client.delete_jobs(queue_name, "pending", body_regex="^x$", limit=2) == 2
    assert client.delete_jobs(queue_name, "pending") == 1
    assert client.lookup(ds) == {}
    with pytest.raises(PriorityNotSupported):
        client.retry_failed(queue_name, priority=4)


def test_input_errors_carry_their_codes(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    with pytest.raises(PriorityNotSupported, match="priority"):
        client.enqueue(queue_name, [Job(b"x", priority=0)])
    with pytest.raises(PriorityNotSupported):
        client.enqueue(queue_name, [Job(b"x", priority=4)])
    with pytest.raises(EnqueueRejected, match="limit"):
        client.enqueue(queue_name, [Job(b"x" * (service.settings.max_body_bytes + 1))])
    with pytest.raises(EnqueueRejected, match="empty"):
        client.enqueue(queue_name, [Job(b"")])
    with pytest.raises(PinLaterError, match="limit must be") as info:
        client.dequeue(queue_name, 0)
    assert info.value.code is ErrorCode.UNKNOWN
    with pytest.raises(PinLaterError, match="malformed job descriptor"):
        client.lookup(["nonsense"])
    service.pause(queue_name)
    with pytest.raises(DequeueRateLimited, match="paused") as limited:
        client.dequeue(queue_name, 1)
    assert limited.value.retry_after_ms == 1000


def test_idempotency_key_on_enqueue(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name)
    first = client.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="order-42")
    again = client.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="order-42")
    in_process = service.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="order-42")
    assert first == again == in_process
    assert client.count(queue_name, "pending") == 2
    other = client.enqueue(queue_name, [Job(b"c")], idempotency_key="order-43")
    assert other != first and client.count(queue_name, "pending") == 3
    # A failed enqueue frees its key.
    with pytest.raises(PriorityNotSupported):
        client.enqueue(queue_name, [Job(b"d", priority=9)], idempotency_key="order-44")
    assert len(client.enqueue(queue_name, [Job(b"d")], idempotency_key="order-44")) == 1


def test_unexpected_errors_are_unknown_and_logged(
    client: ThriftClient, service: JobService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> set[str]:
        raise RuntimeError("boom in the control store")

    monkeypatch.setattr(service, "queue_names", boom)
    with caplog.at_level(logging.ERROR, logger="pinlater.thrift.server"), pytest.raises(PinLaterError) as info:
        client.queue_names()
    assert info.value.code is ErrorCode.UNKNOWN
    assert "RuntimeError: boom in the control store" in info.value.message
    [record] = [r for r in caplog.records if "getQueueNames failed" in r.getMessage()]
    assert record.exc_info is not None
    monkeypatch.undo()
    assert isinstance(client.queue_names(), set)  # the same connection goes on


def test_stats_count_requests_and_errors(client: ThriftClient, server: ThriftServer, queue_name: str) -> None:
    client.create_queue(queue_name)
    with pytest.raises(QueueNotFound):
        client.count("no_such_queue", "pending")
    client.count(queue_name, "pending")
    snap = server.stats.snapshot()
    methods = snap["methods"]
    assert isinstance(methods, dict)
    assert methods["getJobCount"]["requests"] == 2
    assert methods["getJobCount"]["errors_by_code"] == {"QUEUE_NOT_FOUND": 1}
    text = server.stats.prometheus()
    assert 'pinlater_server_errors_total{method="getJobCount",code="QUEUE_NOT_FOUND"} 1' in text
    assert 'pinlater_server_request_seconds{method="getJobCount",quantile="0.99"}' in text


@pytest.mark.parametrize("error", [
    errors.ContinuationInvalid("c"), errors.PasswordInvalid("p"), errors.QueueNameInvalid("n"),
    errors.QueueNameTooLong("t"), errors.QueueNotFound("q"), errors.PriorityNotSupported("p"),
    errors.DequeueRateLimited("r", retry_after_ms=250), errors.EnqueueRejected("e"),
    errors.NoHealthyShards("no shard"), errors.ShardConnectionFailed("conn"), errors.InvalidRequest("bad"),
])
def test_every_error_code_reaches_the_client_typed(
    error: errors.PinLaterError, start_server: Callable[..., ThriftServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = make_service("memory")
    try:
        server = start_server(svc)

        def fail(*args: object, **kwargs: object) -> None:
            raise error

        svc.create_queue("any_queue")  # the server checks the call before the (coalesced) dequeue
        monkeypatch.setattr(svc, "dequeue", fail)
        with ThriftClient([f"127.0.0.1:{server.port}"], source="errors") as c, pytest.raises(PinLaterError) as got:
            c.dequeue("any_queue", 1)
        assert got.value.code is error.code and got.value.message.startswith(error.message)
        if error.code is not ErrorCode.UNKNOWN:
            assert type(got.value) is type(error)
        if isinstance(error, DequeueRateLimited):
            assert isinstance(got.value, DequeueRateLimited) and got.value.retry_after_ms == 250
    finally:
        svc.close()
