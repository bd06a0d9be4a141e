"""Bulk publishing (``workers.bulk``): a Celery group, ``delay_many`` and an
explicit scope store their jobs with enqueue calls of up to a thousand
jobs, each result with its descriptor, every job run once; single
publishes stay one call each. In-process and through the Thrift server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, group
from kombu.exceptions import EncodeError, OperationalError

from pinlater.client_api import PinLaterClient
from pinlater.descriptor import JobDescriptor
from pinlater.errors import EnqueueRejected
from tests.support.waits import wait_until
from tests.workers.celery_tasks import key, qname
from tests.workers.harness import Processes, wait_for_workers, worker_args
from workers import bulk
from workers.publishing import TaskPublishing

pytestmark = pytest.mark.spread_cases


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every enqueue call a publish makes: (bulk or single, its jobs)."""
    made: list[tuple[str, int]] = []
    bulk_enqueue, single = bulk._enqueue, TaskPublishing._enqueue_job

    def spy_bulk(publisher: Any, queue: str, call: list[bulk.Pending]) -> Any:
        made.append(("bulk", len(call)))
        return bulk_enqueue(publisher, queue, call)

    def spy_single(self: TaskPublishing, *args: Any, **kwargs: Any) -> Any:
        made.append(("single", 1))
        return single(self, *args, **kwargs)

    monkeypatch.setattr(bulk, "_enqueue", spy_bulk)
    monkeypatch.setattr(TaskPublishing, "_enqueue_job", spy_single)
    yield made


@pytest.fixture
def drop_pub(service: PinLaterClient) -> Iterator[None]:
    """Deletes the w_pub queue after a test that leaves its jobs unrun: a
    later test's worker on it must not run them."""
    yield
    service.delete_queue(qname("w_pub"), "secret")


def _stored(service: PinLaterClient, results: list[Any]) -> set[str]:
    descriptors = {r.descriptor for r in results}
    assert None not in descriptors and len(descriptors) == len(results)
    assert len({JobDescriptor.parse(d).queue for d in descriptors}) == 1
    found = service.lookup(sorted(descriptors))
    assert set(found) == descriptors
    return descriptors


@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.timeout(180)
def test_a_group_and_delay_many_are_a_few_enqueue_calls_and_each_job_runs_once(
    app: Celery, procs: Processes, results: redis.Redis[bytes], service: PinLaterClient,
    calls: list[tuple[str, int]],
) -> None:
    add, pub = app.tasks["tests.w_add"], app.tasks["tests.w_pub"]
    # A group of 2,500: three calls (1,000, 1,000, 500).
    made = group(add.s(i, 1) for i in range(2500)).apply_async()
    assert calls == [("bulk", 1000), ("bulk", 1000), ("bulk", 500)]
    assert service.count(qname("w_add"), "PENDING") >= 2500

    # delay_many: tuples and keyword arguments, in order.
    calls.clear()
    published = pub.delay_many([(i,) for i in range(1200)] + [{}] * 3)
    assert calls == [("bulk", 1000), ("bulk", 203)]
    pub_descriptors = _stored(service, published)
    # A single publish, and a publish with an idempotency key in a scope: one call each.
    calls.clear()
    assert pub.delay(-1).descriptor is not None
    with bulk.publishing():
        keyed = pub.apply_async((-2,), idempotency_key=f"bulk-{qname('k')}")
        again = pub.apply_async((-2,), idempotency_key=f"bulk-{qname('k')}")
        plain = [pub.delay(-3), pub.delay(-4)]
        assert keyed.descriptor is None  # stored when the scope ends
    assert calls == [("single", 1), ("bulk", 1), ("bulk", 1), ("bulk", 2)]
    assert keyed.descriptor == again.descriptor is not None and None not in {p.descriptor for p in plain}

    procs.start("bulk", worker_args("bulk", [qname("w_add"), qname("w_pub")], 4))
    wait_for_workers(app, ["bulk"])
    assert made.get(timeout=120) == [i + 1 for i in range(2500)]
    runs = key("runs:w_pub")
    expected = pub_descriptors | {keyed.descriptor, *(p.descriptor for p in plain)}
    wait_until(lambda: results.hlen(runs) >= len(expected) + 1, 120, what="every bulk-published job to run")
    counts = {d.decode(): int(n) for d, n in results.hgetall(runs).items()}
    assert all(counts.get(d) == 1 for d in expected), "a job ran twice or not at all"


@pytest.mark.usefixtures("drop_pub")
def test_an_error_in_a_scope_still_stores_what_it_published_and_a_failed_call_raises(
    app: Celery, service: PinLaterClient, calls: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    pub = app.tasks["tests.w_pub"]
    with pytest.raises(ZeroDivisionError), bulk.publishing():
        before = [pub.delay(i) for i in range(3)]
        raise ZeroDivisionError
    assert calls == [("bulk", 3)]
    _stored(service, before)

    def refused(*_: Any, **__: Any) -> Any:
        raise ConnectionResetError("the job service went away")

    monkeypatch.setattr(bulk, "_enqueue", refused)
    with pytest.raises(OperationalError, match="went away"), bulk.publishing():
        pub.delay(1)
    # A block that raised, whose jobs then could not be stored either: its
    # own error is the one raised (the other is logged).
    with pytest.raises(ZeroDivisionError), bulk.publishing():
        pub.delay(2)
        raise ZeroDivisionError


@pytest.mark.usefixtures("drop_pub")
def test_a_group_whose_task_cannot_be_encoded_raises_the_encoding_error(
    app: Celery, service: PinLaterClient, calls: list[tuple[str, int]],
) -> None:
    pub = app.tasks["tests.w_pub"]
    with pytest.raises(EncodeError):
        group([pub.s(1), pub.s(object())])()
    # What the group had published before it goes out, as Celery's own would.
    assert calls == [("bulk", 1)]


@pytest.mark.usefixtures("drop_pub")
def test_a_call_refused_as_too_many_goes_again_in_halves(
    app: Celery, service: PinLaterClient, calls: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job service whose PINLATER_MAX_JOBS_PER_CALL is below a bulk call's
    size refuses the call whole (nothing stored): it goes again as halves."""
    real = bulk._enqueue_once

    def at_most_300(publisher: Any, queue: str, jobs: list[Any], *rest: Any) -> Any:
        if len(jobs) > 300:
            raise EnqueueRejected(f"{len(jobs)} jobs in one call: at most 300 (PINLATER_MAX_JOBS_PER_CALL)")
        return real(publisher, queue, jobs, *rest)

    monkeypatch.setattr(bulk, "_enqueue_once", at_most_300)
    published = app.tasks["tests.w_pub"].delay_many([(i,) for i in range(1000)])
    # 1,000 refused, then 500 and 500 refused, then four calls of 250.
    assert calls == [("bulk", 1000), ("bulk", 500), ("bulk", 250), ("bulk", 250), ("bulk", 500), ("bulk", 250),
                     ("bulk", 250)]
    _stored(service, published)
