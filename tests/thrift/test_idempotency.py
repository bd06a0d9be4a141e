"""Idempotent enqueue in the service layer and the control stores' key
storage (memory, and the Redis and MySQL mixins)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from pinlater import Job
from pinlater.errors import InvalidRequest
from pinlater.service import JobService
from tests.thrift.conftest import make_service


@pytest.fixture
def short_window(backend: str) -> Iterator[JobService]:
    svc = make_service(backend, idempotency_window_ms=300)
    yield svc
    svc.close()


def test_store_reserve_remember_recall_forget(service: JobService) -> None:
    store = service.core.control
    key = f"q/{uuid.uuid4().hex}"
    assert store.recall_enqueue(key) is None
    assert store.reserve_enqueue(key, 60_000) is True
    assert store.reserve_enqueue(key, 60_000) is False
    assert store.recall_enqueue(key) == []  # reserved, not done
    store.remember_enqueue(key, ["q:s1:p1:1", "q:s1:p2:2"], 60_000)
    assert store.recall_enqueue(key) == ["q:s1:p1:1", "q:s1:p2:2"]
    assert store.reserve_enqueue(key, 60_000) is False
    store.forget_enqueue(key)
    assert store.recall_enqueue(key) is None
    assert store.reserve_enqueue(key, 150) is True
    time.sleep(0.3)
    assert store.recall_enqueue(key) is None  # the reservation expired
    assert store.reserve_enqueue(key, 60_000) is True


def test_concurrent_enqueues_with_one_key_create_jobs_once(service: JobService, queue_name: str) -> None:
    service.create_queue(queue_name)
    results: list[list[str]] = []
    barrier = threading.Barrier(8)

    def enqueue() -> None:
        barrier.wait(5)
        results.append(service.enqueue(queue_name, [Job(b"x"), Job(b"y")], idempotency_key="same"))

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 8 and all(r == results[0] for r in results)
    assert service.count(queue_name, "pending") == 2


def test_keys_expire_after_the_window_and_are_per_queue(short_window: JobService, queue_name: str) -> None:
    svc = short_window
    svc.create_queue(queue_name)
    svc.create_queue(queue_name + "_b")
    first = svc.enqueue(queue_name, [Job(b"x")], idempotency_key="k")
    assert svc.enqueue(queue_name, [Job(b"x")], idempotency_key="k") == first
    other_queue = svc.enqueue(queue_name + "_b", [Job(b"x")], idempotency_key="k")
    assert other_queue != first
    time.sleep(0.5)
    assert svc.enqueue(queue_name, [Job(b"x")], idempotency_key="k") != first
    assert svc.count(queue_name, "pending") == 2
    with pytest.raises(InvalidRequest):
        svc.enqueue(queue_name, [Job(b"x")], idempotency_key="k" * 300)
