"""The wire extensions (the EXTENSIONS block of pinlater.thrift) through a
running server, with the Python Thrift client, on memory, Redis and MySQL:
queue configs (create with options, read back, change at run time) and
per-descriptor ACK and checkpoint results; and the client's fallback to the
published methods against a server that lacks them."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator

import pytest

from pinlater import Ack, Checkpoint, Job, JobState, RetryPolicy
from pinlater.errors import DequeueRateLimited, InvalidRequest, PinLaterError, PriorityNotSupported, QueueNotFound
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.thrift import EXTENSION_METHODS, idl, published
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from workers.heartbeat import HELD, LOST, beat

OPTIONS: dict[str, object] = {
    "priorities": 5,
    "max_dequeue_rate": 200.0,
    "claim_timeout_ms": 5000,
    "retry": RetryPolicy.custom([1000, 2000]),
    "succeeded_retention_ms": 60_000,
    "failed_retention_ms": 120_000,
}


def test_create_queue_with_options_is_stored_and_read_back(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    config = client.create_queue(queue_name, **OPTIONS)  # type: ignore[arg-type]
    stored = service.queue_config(queue_name, fresh=True)
    assert config == stored
    assert (stored.priorities, stored.max_dequeue_rate, stored.claim_timeout_ms) == (5, 200.0, 5000)
    assert stored.retry == RetryPolicy.custom([1000, 2000])
    assert (stored.succeeded_retention_ms, stored.failed_retention_ms) == (60_000, 120_000)
    assert client.queue_config(queue_name) == stored
    # Idempotent: an existing queue keeps its config, which is returned.
    again = client.create_queue(queue_name, priorities=2, max_dequeue_rate=1.0)
    assert again == stored
    # The options are in force: priority 5 exists, the retry policy sets attempts.
    [d] = client.enqueue(queue_name, [Job(b"x", priority=5)])
    [job] = client.dequeue(queue_name, 1)
    assert job.descriptor == d and job.attempts_allowed == 3
    with pytest.raises(PriorityNotSupported):
        client.enqueue(queue_name, [Job(b"x", priority=6)])


def test_create_queue_without_options_returns_the_server_defaults(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    config = client.create_queue(queue_name)
    assert config == service.queue_config(queue_name, fresh=True)
    assert config.max_dequeue_rate is None and config.priorities == service.settings.default_priorities


def test_update_queue_over_the_wire(client: ThriftClient, service: JobService, queue_name: str) -> None:
    client.create_queue(queue_name, max_dequeue_rate=10.0)
    assert client.set_rate(queue_name, 25.5).max_dequeue_rate == 25.5
    assert service.queue_config(queue_name, fresh=True).max_dequeue_rate == 25.5
    assert client.pause(queue_name).paused
    client.enqueue(queue_name, [Job(b"x")])
    with pytest.raises(DequeueRateLimited, match="paused"):
        service.dequeue(queue_name, 1)
    assert not client.resume(queue_name).paused
    unlimited = client.set_rate(queue_name, None)
    assert unlimited.max_dequeue_rate is None
    assert service.queue_config(queue_name, fresh=True).max_dequeue_rate is None
    changed = client.update_queue(
        queue_name, claim_timeout_ms=7000, retry=RetryPolicy.constant(500, retries=1), failed_retention_ms=1000
    )
    assert changed == service.queue_config(queue_name, fresh=True) == client.queue_config(queue_name)
    assert (changed.claim_timeout_ms, changed.retry, changed.failed_retention_ms) == (
        7000, RetryPolicy.constant(500, retries=1), 1000,
    )
    with pytest.raises(InvalidRequest, match="priorities"):
        client.update_queue(queue_name, priorities=4)
    with pytest.raises(QueueNotFound):
        client.set_rate(f"{queue_name}_missing", 1.0)
    with pytest.raises(QueueNotFound):
        client.queue_config(f"{queue_name}_missing")


@pytest.mark.parametrize("rate", [math.nan, math.inf, -math.inf, -1.0, 2e9])
def test_bad_rates_are_refused_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str, rate: float
) -> None:
    with pytest.raises(PinLaterError, match="max_dequeue_rate must be a finite number"):
        client.create_queue(queue_name, max_dequeue_rate=rate)
    assert queue_name not in client.queue_names()
    client.create_queue(queue_name, max_dequeue_rate=5.0)
    with pytest.raises(PinLaterError, match="max_dequeue_rate must be a finite number"):
        client.set_rate(queue_name, rate)
    assert service.queue_config(queue_name, fresh=True).max_dequeue_rate == 5.0


def test_other_bad_options_are_refused_over_the_wire(
    client: ThriftClient, service: JobService, queue_name: str
) -> None:
    with pytest.raises(PinLaterError, match="claim_timeout_ms"):
        client.create_queue(queue_name, claim_timeout_ms=10)
    with pytest.raises(PinLaterError, match="claimTimeoutMillis"):
        client.create_queue(queue_name, claim_timeout_ms=-1)
    with pytest.raises(PinLaterError, match="priorities"):
        client.create_queue(queue_name, priorities=101)
    bad_kind = idl.PinLaterRetryPolicy(kind="sometimes")
    with pytest.raises(PinLaterError, match="unknown retry policy kind"):
        client._call("createQueueWithConfig", idempotent=True, context=client._context(),
                     config=idl.PinLaterQueueConfig(name=queue_name, retryPolicy=bad_kind))
    with pytest.raises(PinLaterError, match="created paused"):
        client._call("createQueueWithConfig", idempotent=True, context=client._context(),
                     config=idl.PinLaterQueueConfig(name=queue_name, paused=True))
    assert queue_name not in client.queue_names()
    client.create_queue(queue_name)
    both = idl.PinLaterQueueConfigUpdate(name=queue_name, maxDequeueRate=1.0, unlimitedRate=True)
    with pytest.raises(PinLaterError, match="not both"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(), update=both)
    with pytest.raises(PinLaterError, match="changes nothing"):
        client._call("updateQueueConfig", idempotent=True, context=client._context(),
                     update=idl.PinLaterQueueConfigUpdate(name=queue_name))
    # The client checks a change as the service does: "yes" is not true.
    for caller in (client, service):
        with pytest.raises(InvalidRequest, match="paused must be true or false"):
            caller.update_queue(queue_name, paused="yes")
        with pytest.raises(InvalidRequest, match="claim_timeout_ms must be"):
            caller.update_queue(queue_name, claim_timeout_ms="1000")
    assert client.queue_config(queue_name).paused is False


def test_queue_config_is_cached_for_the_ttl(server: ThriftServer, service: JobService, queue_name: str) -> None:
    with ThriftClient([f"127.0.0.1:{server.port}"], source="cache-test", config_ttl_s=60) as c:
        c.create_queue(queue_name, max_dequeue_rate=1.0)
        service.set_rate(queue_name, 2.0)
        assert c.queue_config(queue_name).max_dequeue_rate == 1.0  # cached
        assert c.queue_config(queue_name, fresh=True).max_dequeue_rate == 2.0
    with ThriftClient([f"127.0.0.1:{server.port}"], source="cache-test", config_ttl_s=0.2) as c:
        assert c.queue_config(queue_name).max_dequeue_rate == 2.0
        service.set_rate(queue_name, 3.0)
        time.sleep(0.3)
        assert c.queue_config(queue_name).max_dequeue_rate == 3.0


def test_stale_acks_and_checkpoints_are_reported_stale(
    client: ThriftClient, other_client: ThriftClient, queue_name: str
) -> None:
    client.create_queue(queue_name)
    d1, d2 = client.enqueue(queue_name, [Job(b"1"), Job(b"2")])
    client.dequeue(queue_name, 2)
    # Another source holds no claim: nothing changes, and the answer says so.
    theirs = other_client.checkpoint(queue_name, [Checkpoint(d1), Checkpoint(d2)])
    assert (theirs.acked, sorted(theirs.stale), theirs.unapplied) == ([], sorted([d1, d2]), {})
    theirs = other_client.ack(queue_name, succeeded=[Ack(d1)], failed=[Ack(d2)])
    assert (theirs.acked, sorted(theirs.stale), theirs.unapplied) == ([], sorted([d1, d2]), {})
    assert {i.state for i in client.lookup([d1, d2]).values()} == {JobState.RUNNING}
    # The claim holder: applied.
    mine = client.checkpoint(queue_name, [Checkpoint(d1)])
    assert (mine.acked, mine.stale) == ([d1], [])
    mine = client.ack(queue_name, succeeded=[Ack(d1)])
    assert (mine.acked, mine.stale) == ([d1], [])
    # Already acked: a repeat is stale.
    assert client.ack(queue_name, succeeded=[Ack(d1)]).stale == [d1]


def test_a_worker_heartbeat_over_thrift_sees_a_lost_claim(
    client: ThriftClient, other_client: ThriftClient, service: JobService, queue_name: str
) -> None:
    """The job times out and another worker claims it: the first worker's
    heartbeat (workers.heartbeat.beat, as a task's) says the claim is gone."""
    client.create_queue(queue_name, claim_timeout_ms=200)
    [d] = client.enqueue(queue_name, [Job(b"long")])
    [_job] = client.dequeue(queue_name, 1)
    assert beat(client, queue_name, d, client.source) == HELD
    time.sleep(0.3)
    Monitor(service.operators, queues=[queue_name]).run_once()  # the claim times out
    [again] = other_client.dequeue(queue_name, 1)
    assert again.descriptor == d
    assert beat(client, queue_name, d, client.source) == LOST
    assert beat(other_client, queue_name, d, other_client.source) == HELD


def test_extension_methods_are_served(server: ThriftServer) -> None:
    assert {
        "createQueueWithConfig", "getQueueConfig", "updateQueueConfig",
        "ackDequeuedJobsWithResult", "checkpointJobsWithResult", "cancelJobs",
        "createBatch", "sealBatch", "getBatch", "cancelBatch",
    } == EXTENSION_METHODS
    assert set(server.methods) >= EXTENSION_METHODS
    assert not EXTENSION_METHODS & set(published.thrift_services)


# -- a server without the extensions --------------------------------------------------------------
@pytest.fixture
def stock_server(
    service: JobService, start_server: Callable[..., ThriftServer]
) -> Iterator[ThriftServer]:
    """Our server answering only the published methods, as a stock
    PinLater server does (UNKNOWN_METHOD for anything else)."""
    server = start_server(service)
    server.methods = {name: signature for name, signature in server.methods.items()
                      if name in published.thrift_services}
    yield server


def test_client_falls_back_to_the_published_methods_with_a_warning(
    stock_server: ThriftServer, service: JobService, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pinlater.thrift.client"), \
            ThriftClient([f"127.0.0.1:{stock_server.port}"], source="old-server-test") as c:
        config = c.create_queue(queue_name)
        assert config.name == queue_name and queue_name in c.queue_names()
        with pytest.raises(InvalidRequest, match="no createQueueWithConfig"):
            c.create_queue(queue_name, max_dequeue_rate=200)
        with pytest.raises(InvalidRequest, match="no updateQueueConfig"):
            c.set_rate(queue_name, 5.0)
        assert c.queue_config(queue_name).max_dequeue_rate is None  # the defaults: nothing to read
        [d] = c.enqueue(queue_name, [Job(b"x")])
        c.dequeue(queue_name, 1)
        assert c.checkpoint(queue_name, [Checkpoint(d)]).acked == [d]
        assert c.ack(queue_name, succeeded=[Ack(d)]).acked == [d]
        assert service.lookup([d])[d].state is JobState.SUCCEEDED
        with pytest.raises(InvalidRequest, match="no cancelJobs"):
            c.cancel(queue_name, [d])
        # Batches have no published way at all: refused in one line, no warning.
        with pytest.raises(InvalidRequest, match="the server has no createBatch"):
            c.create_batch(queue_name, Job(b"cb"))
        with pytest.raises(InvalidRequest, match="the server has no getBatch"):
            c.batch_status(f"{queue_name}.b" + "0" * 24)
    warned = [r.getMessage().split(" has no ")[1].split(" ")[0] for r in caplog.records if " has no " in r.getMessage()]
    batches = {"createBatch", "sealBatch", "getBatch", "cancelBatch"}
    assert sorted(warned) == sorted(EXTENSION_METHODS - batches)  # once per method, not per call
