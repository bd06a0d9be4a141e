"""ACKs that piled up (an outage, a long backlog) go out in calls the
service accepts: the service caps ACKs per call, and a worker that sent them
in one call would be refused forever."""

from __future__ import annotations

from types import SimpleNamespace

from pinlater import Ack, Job, JobService, JobState
from tests.support.stores import settings_for
from workers.channel import Channel
from workers.qos import PendingAcks
from workers.settling import ACK_CHUNK


def test_piled_up_acks_and_releases_go_out_in_accepted_calls(queue_name: str) -> None:
    settings = settings_for("memory", max_jobs_per_call=ACK_CHUNK)
    with JobService.from_settings(settings, source="worker-x") as service:
        service.create_queue(queue_name)
        for _ in range(4):
            service.enqueue(queue_name, [Job(b"j")] * ACK_CHUNK)
        jobs = [j for _ in range(4) for j in service.dequeue(queue_name, ACK_CHUNK)]
        acks = PendingAcks(
            succeeded=[Ack(j.descriptor) for j in jobs[:250]],
            failed=[Ack(j.descriptor, retry_delay_ms=60_000) for j in jobs[250:330]],
            released=[j.descriptor for j in jobs[330:]],
        )
        channel = SimpleNamespace(client=service, connection=SimpleNamespace(source="worker-x"))
        Channel._send_acks(channel, queue_name, acks)  # type: ignore[arg-type]
        Channel._send_releases(channel, queue_name, acks)  # type: ignore[arg-type]
        assert not acks
        assert service.count(queue_name, JobState.SUCCEEDED) == 250
        assert service.count(queue_name, JobState.PENDING, future=True) == 80
        assert service.count(queue_name, JobState.PENDING) == 4 * ACK_CHUNK - 330
        assert service.count(queue_name, JobState.RUNNING) == 0
