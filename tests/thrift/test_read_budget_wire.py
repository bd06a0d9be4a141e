"""What a lookup or scan may cost holds on the wire as in-process
(tests/contract/test_read_budget.py): a job named many times is one entry,
and bodies past PINLATER_MAX_READ_BYTES are refused with a
PinLaterException the client raises, the server serving on."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from pinlater import Job, JobService
from pinlater.errors import ErrorCode, PinLaterError
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from pinlater.validation import MAX_LIMIT
from tests.thrift.conftest import make_service

BODY = 64 * 1024
BUDGET = 4 * BODY


@pytest.fixture
def budgeted(backend: str, start_server: Callable[..., ThriftServer]) -> Iterator[tuple[JobService, ThriftClient]]:
    """A server whose calls may return four bodies of the largest size, and a client of it."""
    service = make_service(backend, max_body_bytes=BODY, max_read_bytes=BUDGET)
    server = start_server(service)
    client = ThriftClient([f"127.0.0.1:{server.port}"], source="test-reader", timeout_s=10)
    yield service, client
    client.close()
    service.close()


def _refused(call: Callable[[], object]) -> PinLaterError:
    with pytest.raises(PinLaterError) as caught:
        call()
    error = caught.value
    assert error.code is ErrorCode.UNKNOWN
    assert "\n" not in error.message
    assert "PINLATER_MAX_READ_BYTES" in error.message
    return error


def test_a_job_named_ten_thousand_times_is_one_entry_and_one_more_name_is_refused(
    budgeted: tuple[JobService, ThriftClient], queue_name: str
) -> None:
    service, client = budgeted
    service.create_queue(queue_name)
    [descriptor] = client.enqueue(queue_name, [Job(b"b" * BODY)])
    client.lookup([descriptor], include_body=True)  # connections and scripts are not measured
    asked = [descriptor] * MAX_LIMIT
    tracemalloc.start()  # the server runs in this process: both ends are counted
    try:
        found = client.lookup(asked, include_body=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(found) == [descriptor]
    # The names take ~1.7 MB at the two ends; a body per name would be 640 MiB.
    assert peak < 64 * BODY, f"peak {peak} bytes for a body of {BODY}"
    assert found[descriptor].body == b"b" * BODY
    with pytest.raises(PinLaterError, match=f"{MAX_LIMIT + 1} descriptors in one call; the limit is {MAX_LIMIT}"):
        client.lookup([descriptor] * (MAX_LIMIT + 1))


def test_lookups_and_scans_past_the_read_budget_are_refused_on_the_wire(
    budgeted: tuple[JobService, ThriftClient], queue_name: str
) -> None:
    service, client = budgeted
    service.create_queue(queue_name)
    # In-process: one request frame has room for 16 bodies.
    descriptors = service.enqueue(queue_name, [Job(bytes([65 + i % 26]) * BODY) for i in range(40)])

    error = _refused(lambda: client.lookup(descriptors, include_body=True))
    assert error.message.startswith(f"lookup with bodies refused: the bodies come to more than {BUDGET} bytes")
    _refused(lambda: client.lookup(descriptors[:5], include_body=True))
    # The client fetches a scan's bodies with a lookup: the same budget.
    _refused(lambda: client.scan(queue_name, "pending", limit=40, include_body=True))

    # The server serves on, and within the budget, or without bodies, answers.
    found = client.lookup(descriptors[:4], include_body=True)
    assert [found[d].body for d in descriptors[:4]] == [bytes([65 + i]) * BODY for i in range(4)]
    assert len(client.lookup(descriptors)) == 40
    page = client.scan(queue_name, "pending", limit=4, include_body=True)
    assert [len(job.body or b"") for job in page.jobs] == [BODY] * 4
    assert len(client.scan(queue_name, "pending", limit=40).jobs) == 40
