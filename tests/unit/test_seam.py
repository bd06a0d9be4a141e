"""The instrumented seam: every store call of the job service is counted,
timed and classified there, and the per-queue events come from it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinlater import Ack, Job, JobService
from pinlater.errors import ShardConnectionFailed
from tests.support.stores import settings_for


@pytest.fixture
def svc() -> Iterator[JobService]:
    service = JobService.from_settings(settings_for("memory"), source="seam-test")
    yield service
    service.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_store_call_is_counted_and_timed_by_operation(svc: JobService, queue_name: str) -> None:
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    svc.enqueue(queue_name, [Job(b"c")])
    jobs = svc.dequeue(queue_name, 3)
    svc.ack(queue_name, succeeded=[Ack(jobs[0].descriptor)], failed=[Ack(jobs[1].descriptor)])
    svc.count(queue_name, "pending")
    snap = svc.operators.core.shards.seam.metrics.snapshot()
    (shard,) = snap
    ops = snap[shard]
    assert ops["enqueue"]["calls"] == 2
    assert ops["ack_succeeded"]["calls"] == 1 and ops["ack_failed"]["calls"] == 1
    assert ops["dequeue"]["calls"] == 1 and ops["count"]["calls"] == 3  # one per priority
    buckets = ops["enqueue"]["buckets"]
    assert isinstance(buckets, dict) and buckets["+Inf"] == 2
    samples = _samples(svc.operators.store_metrics())
    assert samples[("pinlater_store_calls_total", (("op", "enqueue"), ("shard", shard)))] == 2
    assert samples[("pinlater_store_call_seconds_count", (("op", "enqueue"), ("shard", shard)))] == 2
    assert samples[("pinlater_store_call_seconds_bucket", (("le", "+Inf"), ("op", "enqueue"), ("shard", shard)))] == 2


def test_a_failing_store_call_is_counted_as_an_error_of_its_kind(
    svc: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    backend = svc.core.shards.all()[0]

    def down(*args: object, **kwargs: object) -> None:
        raise ShardConnectionFailed("gone")

    monkeypatch.setattr(backend, "enqueue", down)
    with pytest.raises(ShardConnectionFailed, match="gone"):
        svc.enqueue(queue_name, [Job(b"x")])
    ops = svc.core.shards.seam.metrics.snapshot()[backend.shard_id]
    assert ops["enqueue"]["errors"] == {"ShardConnectionFailed": 1}
    samples = _samples(svc.operators.store_metrics())
    key = ("pinlater_store_errors_total", (("error", "ShardConnectionFailed"), ("op", "enqueue"),
                                           ("shard", backend.shard_id)))
    assert samples[key] == 1


def test_the_queue_events_come_from_the_seam(svc: JobService, queue_name: str) -> None:
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"a"), Job(b"b"), Job(b"c")])
    jobs = svc.dequeue(queue_name, 2)
    svc.ack(queue_name, succeeded=[Ack(jobs[0].descriptor)], failed=[Ack(jobs[1].descriptor, retry_delay_ms=1)])
    svc.ack(queue_name, succeeded=[Ack(jobs[0].descriptor)])  # stale: counts nothing
    svc.dequeue(queue_name, 10, dry_run=True)  # a peek claims nothing: counts nothing
    svc.operators.flush_counters()
    totals = svc.operators.recent_totals(minutes=2)[queue_name]
    assert (totals["enqueued"], totals["dequeued"], totals["succeeded"], totals["failed"]) == (3, 2, 1, 1)
