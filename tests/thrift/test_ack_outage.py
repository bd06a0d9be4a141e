"""An ACK (or checkpoint) spanning two shards while one of them is down:
the healthy shard's part is applied, and the answer says per descriptor
what was applied and what was not, in-process (``AckNotApplied.result``)
and over the wire (the ``ackDequeuedJobsWithResult`` extension, raised
again as ``AckNotApplied`` by the Thrift client). Retrying only
``unapplied`` after the shard returns finishes the rest.

The shard that goes down is a Redis of this module's own (started and
stopped with ``scripts/services`` on a free port, data under a temporary
directory), so suites running at the same time keep their shards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pinlater import Ack, Checkpoint, Job, JobState
from pinlater.client_api import PinLaterClient
from pinlater.descriptor import JobDescriptor
from pinlater.errors import AckNotApplied
from pinlater.service import JobService
from pinlater.settings import parse_shards
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.servers import REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, redis_url
from tests.support.stores import settings_for
from tests.support.waits import wait_for


@pytest.fixture
def service(private_redis: PrivateRedis) -> Iterator[JobService]:
    private_redis.start()  # up at the start of every test, whatever the last one left
    shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)},rx={redis_url(private_redis.port, REDIS_SHARD_DB)}"
    settings = settings_for("redis", shards=parse_shards(shards), socket_timeout_s=2.0)
    with JobService.from_settings(settings, source="outage-server") as svc:
        yield svc


@pytest.fixture(params=["in_process", "thrift"])
def client(
    request: pytest.FixtureRequest, service: JobService, start_server: object
) -> Iterator[PinLaterClient]:
    if request.param == "in_process":
        yield JobService(service.core.sibling(), source="outage-worker")
        return
    server: ThriftServer = start_server(service)  # type: ignore[operator]
    with ThriftClient([f"127.0.0.1:{server.port}"], source="outage-worker", timeout_s=10) as c:
        yield c


def _claimed_on_both_shards(client: PinLaterClient, queue: str) -> dict[str, list[str]]:
    """Enqueues (each call lands on a random shard) until both shards have
    jobs; claims them all; descriptors by shard."""
    by_shard: dict[str, list[str]] = {"r1": [], "rx": []}
    for _ in range(200):
        for d in client.enqueue(queue, [Job(b"job")] * 3):
            by_shard[JobDescriptor.parse(d).shard].append(d)
        if all(len(ds) >= 3 for ds in by_shard.values()):
            break
    assert all(by_shard.values()), f"enqueues never reached both shards: {by_shard}"
    total = sum(len(ds) for ds in by_shard.values())
    claimed = client.dequeue(queue, total)
    assert len(claimed) == total
    return by_shard


def test_cross_shard_ack_with_a_shard_down_reports_per_descriptor(
    client: PinLaterClient, service: JobService, private_redis: PrivateRedis, queue_name: str
) -> None:
    client.create_queue(queue_name)
    by_shard = _claimed_on_both_shards(client, queue_name)
    healthy, down = by_shard["r1"], by_shard["rx"]
    everything = healthy + down

    private_redis.stop()
    try:
        # Checkpoints: applied on r1, not applied on rx.
        with pytest.raises(AckNotApplied) as beat:
            client.checkpoint(queue_name, [Checkpoint(d) for d in everything])
        assert sorted(beat.value.result.acked) == sorted(healthy)
        assert sorted(beat.value.result.unapplied) == sorted(down)
        assert beat.value.result.stale == []

        # ACKs: success for half of each shard's jobs, failure for the rest.
        succeeded = [Ack(d) for d in healthy[::2] + down[::2]]
        failed = [Ack(d, retry_delay_ms=600_000) for d in healthy[1::2] + down[1::2]]
        with pytest.raises(AckNotApplied) as ack:
            client.ack(queue_name, succeeded=succeeded, failed=failed)
        result = ack.value.result
        assert sorted(result.acked) == sorted(healthy) and result.stale == []
        assert sorted(result.unapplied) == sorted(down)
        assert all("rx" in cause for cause in result.unapplied.values()), result.unapplied
        applied = service.lookup(healthy)
        assert {applied[d].state for d in healthy[::2]} == {JobState.SUCCEEDED}
        assert {applied[d].state for d in healthy[1::2]} == {JobState.PENDING}
    finally:
        private_redis.start()

    wait_for(lambda: service.core.shards.is_healthy("rx"), "shard rx back in rotation", 30, 0.1)
    # Retry only what was not applied: all of it lands, nothing is stale.
    left = set(result.unapplied)
    retried = client.ack(
        queue_name,
        succeeded=[a for a in succeeded if a.descriptor in left],
        failed=[a for a in failed if a.descriptor in left],
    )
    assert (sorted(retried.acked), retried.stale, retried.unapplied) == (sorted(down), [], {})
    states = service.lookup(everything)
    assert {states[a.descriptor].state for a in succeeded} == {JobState.SUCCEEDED}
    assert {states[a.descriptor].state for a in failed} == {JobState.PENDING}
    assert all(states[a.descriptor].attempts_remaining == states[a.descriptor].attempts_allowed - 1 for a in failed)
