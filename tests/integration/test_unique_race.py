"""Unique keys under racing producers: 8 threads in 2 processes enqueue the
same key 1,000 times. While the key is free exactly one job is stored and
every other enqueue answers it as a duplicate; while that job runs every
enqueue does too; once it has succeeded the next one is stored. In-process
over Redis, MySQL and two shards of each, and through ``pinlater server``."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from pinlater import Ack, Job
from pinlater.client_api import PinLaterClient
from pinlater.service import JobService
from pinlater.settings import Settings
from tests.integration.procs import enqueue_unique
from tests.support.server_process import ServerProcess, server_env
from tests.support.stores import settings_for

PROCESSES, THREADS, EACH = 2, 4, 125  # 1,000 enqueues


def _race(where: Settings | str, queue: str, unique: str) -> list[tuple[str, bool]]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        ready = manager.Barrier(PROCESSES)
        futures = [pool.submit(enqueue_unique, where, queue, unique, THREADS, EACH, ready) for _ in range(PROCESSES)]
        answers = [a for f in futures for a in f.result(timeout=300)]
    assert len(answers) == PROCESSES * THREADS * EACH
    return answers


def _check(client: PinLaterClient, where: Settings | str, queue: str) -> None:
    # Free: the racers store one job between them.
    answers = _race(where, queue, "account:42")
    stored = [d for d, duplicate in answers if not duplicate]
    assert len(stored) == 1, f"{len(stored)} jobs stored for one key"
    assert {d for d, _ in answers} == set(stored)
    assert client.count(queue, "pending") == 1
    # Running: every enqueue is that job.
    [job] = client.dequeue(queue, 10)
    assert job.descriptor == stored[0]
    answers = _race(where, queue, "account:42")
    assert all(duplicate and d == job.descriptor for d, duplicate in answers)
    assert client.count(queue, "pending") == 0 and client.count(queue, "running") == 1
    # Ended: the next one is stored.
    assert client.ack(queue, succeeded=[Ack(job.descriptor, claim=job.claim)]).acked == [job.descriptor]
    after = client.enqueue(queue, [Job(b"later", unique="account:42")])
    assert after.duplicates == () and after[0] != job.descriptor


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["redis", "mysql", "redis_sharded", "mysql_sharded"])
def test_racing_producers_store_one_job_per_key(servers: None, setup: str, queue_name: str) -> None:
    settings = settings_for(setup)
    with JobService.from_settings(settings, source="test") as client:
        client.create_queue(queue_name)
        _check(client, settings, queue_name)


@pytest.fixture
def server(servers: None) -> Iterator[ServerProcess]:
    with ServerProcess("--no-monitor", "--grace", "5", env=server_env()) as process:
        yield process


@pytest.mark.slow
def test_racing_producers_through_the_server(server: ServerProcess, queue_name: str) -> None:
    client = server.client("test")
    try:
        client.create_queue(queue_name)
        _check(client, server.address, queue_name)
    finally:
        client.close()
