"""What a lookup or scan may cost: a job named many times is read once, and
the bodies one call returns are bounded (PINLATER_MAX_READ_BYTES), refused
past the budget before the shards hand over the bodies beyond it. The
same on every setup; the allocation is measured with tracemalloc, in-process.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

import pytest

from pinlater import Job, JobService
from pinlater.descriptor import JobDescriptor
from pinlater.errors import ErrorCode, InvalidRequest, ReadBudgetExceeded
from pinlater.validation import MAX_LIMIT
from tests.support.stores import settings_for

T = TypeVar("T")
BODY = 64 * 1024
# Four bodies: the budget of the service below.
BUDGET = 4 * BODY


def _peak(call: Callable[[], T]) -> tuple[T, int]:
    """``call()`` and the most bytes allocated at once while it ran."""
    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def _refused_peak(call: Callable[[], object]) -> tuple[ReadBudgetExceeded, int]:
    tracemalloc.start()
    try:
        with pytest.raises(ReadBudgetExceeded) as caught:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return caught.value, peak


@pytest.fixture
def budgeted(setup: str) -> Iterator[JobService]:
    """A service whose calls may return four bodies of the largest size."""
    service = JobService.from_settings(settings_for(setup, max_body_bytes=BODY, max_read_bytes=BUDGET),
                                       source="test-reader")
    yield service
    service.close()


def _bodies(count: int) -> list[Job]:
    return [Job(bytes([65 + i % 26]) * BODY) for i in range(count)]


def test_a_job_named_thousands_of_times_is_read_once(setup: str, queue_name: str) -> None:
    big = 256 * 1024
    service = JobService.from_settings(settings_for(setup, max_body_bytes=big), source="test-reader")
    try:
        service.create_queue(queue_name)
        [descriptor] = service.enqueue(queue_name, [Job(b"x" * big)])
        service.lookup([descriptor], include_body=True)  # connections and scripts are not measured
        d = JobDescriptor.parse(descriptor)
        # A job has one spelling: another (leading zeros) is refused before
        # anything is read, so it cannot name the job a second time.
        with pytest.raises(InvalidRequest, match="without leading zeros"):
            service.lookup([descriptor, f"{d.queue}:s{d.shard}:p0{d.priority}:00{d.local_id}"], include_body=True)
        found, peak = _peak(lambda: service.lookup([descriptor] * 2000, include_body=True))
    finally:
        service.close()
    assert list(found) == [descriptor]
    assert found[descriptor].body == b"x" * big
    # One body read and returned, not one per name (2,000 of them: 500 MiB).
    assert peak < 4 * big, f"peak {peak} bytes for a body of {big}"


def test_as_many_descriptors_as_allowed_are_answered_and_one_more_is_refused(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    [descriptor] = cluster.enqueue(queue_name, [Job(b"one")])
    assert list(cluster.lookup([descriptor] * MAX_LIMIT, include_body=True)) == [descriptor]
    for include_body in (False, True):
        with pytest.raises(InvalidRequest) as caught:
            cluster.lookup([descriptor] * (MAX_LIMIT + 1), include_body=include_body)
        limit = f"{MAX_LIMIT + 1} descriptors in one call; the limit is {MAX_LIMIT}: split the batch"
        assert caught.value.message == limit


def test_a_lookup_within_the_budget_answers_and_one_past_it_is_refused(budgeted: JobService, queue_name: str) -> None:
    budgeted.create_queue(queue_name)
    descriptors = budgeted.enqueue(queue_name, _bodies(40))
    # Exactly the budget: four whole bodies, on one shard or several.
    found = budgeted.lookup(descriptors[:4], include_body=True)
    assert [found[d].body for d in descriptors[:4]] == [bytes([65 + i]) * BODY for i in range(4)]

    error, peak = _refused_peak(lambda: budgeted.lookup(descriptors, include_body=True))
    assert error.code is ErrorCode.UNKNOWN
    assert "\n" not in error.message
    assert error.message == (
        f"lookup with bodies refused: the bodies come to more than {BUDGET} bytes, the most one call may "
        "return (PINLATER_MAX_READ_BYTES); ask for fewer jobs, or leave the bodies out"
    )
    # The shards withheld the bodies past the budget: the 40 (2.5 MiB) were
    # never all read. (What is read may be held twice: as the store's reply
    # and as the bodies made of it.)
    assert peak < 3 * BUDGET, f"peak {peak} bytes for a budget of {BUDGET}"
    with pytest.raises(ReadBudgetExceeded):
        budgeted.lookup(descriptors[:5], include_body=True)
    # Nothing is lost: without bodies every job answers (and no shard hands
    # over the bodies it would drop), and the bodies in batches within the budget.
    found, peak = _peak(lambda: budgeted.lookup(descriptors))
    assert len(found) == 40
    assert peak < 3 * BUDGET, f"peak {peak} bytes for a budget of {BUDGET}"
    for start in range(0, 40, 4):
        batch = descriptors[start:start + 4]
        assert all(info.body is not None for info in budgeted.lookup(batch, include_body=True).values())


def test_a_scan_with_bodies_past_the_budget_is_refused(budgeted: JobService, queue_name: str) -> None:
    budgeted.create_queue(queue_name)
    budgeted.enqueue(queue_name, _bodies(40))
    page = budgeted.scan(queue_name, "pending", limit=4, include_body=True)
    assert [len(job.body or b"") for job in page.jobs] == [BODY] * 4

    error, peak = _refused_peak(lambda: budgeted.scan(queue_name, "pending", limit=40, include_body=True))
    assert error.message.startswith(f"scan of queue {queue_name!r} with bodies refused: the bodies come to more than")
    assert "PINLATER_MAX_READ_BYTES" in error.message
    assert peak < 3 * BUDGET, f"peak {peak} bytes for a budget of {BUDGET}"
    with pytest.raises(ReadBudgetExceeded):
        budgeted.scan(queue_name, "pending", limit=5, include_body=True)
    with pytest.raises(ReadBudgetExceeded):
        budgeted.scan(queue_name, "pending", limit=40, body_regex="^[A-Z]", include_body=True)

    # Without bodies, or a page at a time within the budget, the scan sees every job.
    heads, peak = _peak(lambda: budgeted.scan(queue_name, "pending", limit=40))
    assert len(heads.jobs) == 40
    assert peak < 3 * BUDGET, f"peak {peak} bytes for a budget of {BUDGET}"
    assert len(budgeted.scan(queue_name, "pending", limit=40, body_regex="^[A-Z]").jobs) == 40
    seen = list(page.jobs)
    while page.continuation != "-1":
        page = budgeted.scan(queue_name, "pending", limit=4, include_body=True, continuation=page.continuation)
        seen += page.jobs
    assert len({job.descriptor for job in seen}) == 40
    assert all(job.body is not None and len(job.body) == BODY for job in seen)


def test_a_scan_page_of_small_bodies_among_large_ones_is_answered(budgeted: JobService, queue_name: str) -> None:
    """The budget counts what the call returns, not what one source holds:
    a page whose jobs fit is answered even when the jobs after them would
    not."""
    budgeted.create_queue(queue_name, priorities=2)
    budgeted.enqueue(queue_name, [Job(b"L" * BODY, priority=1, run_after_ms=1000 + i) for i in range(8)])
    budgeted.enqueue(queue_name, [Job(b"s", priority=2, run_after_ms=2000 + i) for i in range(8)])
    page = budgeted.scan(queue_name, "pending", limit=11, include_body=True)
    assert [job.body for job in page.jobs] == [b"s"] * 8 + [b"L" * BODY] * 3
    with pytest.raises(ReadBudgetExceeded):
        budgeted.scan(queue_name, "pending", limit=13, include_body=True)


def test_a_body_stored_under_a_larger_body_limit_is_still_counted(cluster: JobService, queue_name: str) -> None:
    """A lookup of a few jobs reads their bodies unbounded when bodies of
    the largest size would fit the budget; one stored before the limit was
    lowered is counted once read, and refused."""
    cluster.create_queue(queue_name)
    [descriptor] = cluster.enqueue(queue_name, [Job(b"x" * 10_000)])
    lowered = replace(cluster.settings, max_body_bytes=1000, max_read_bytes=4000)
    reader = JobService(cluster.core.sibling(lowered), source="test-reader")
    with pytest.raises(ReadBudgetExceeded):
        reader.lookup([descriptor], include_body=True)
    with pytest.raises(ReadBudgetExceeded):
        reader.scan(queue_name, "pending", limit=1, include_body=True)
    assert reader.lookup([descriptor])[descriptor].body is None
    assert len(reader.scan(queue_name, "pending").jobs) == 1


def test_a_bad_read_budget_stops_the_service_at_start(setup: str) -> None:
    with pytest.raises(ValueError, match="PINLATER_MAX_READ_BYTES: must be at least PINLATER_MAX_BODY_BYTES"):
        JobService.from_settings(settings_for(setup, max_body_bytes=BODY, max_read_bytes=BODY - 1))
