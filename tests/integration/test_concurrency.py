"""Four processes drain 20,000 jobs from one queue: every job ends
SUCCEEDED exactly once and none is ever handed to two live claims."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from pinlater import Job
from pinlater.service import JobService
from tests.integration.procs import drain
from tests.support.stores import settings_for

JOBS = 20_000
PROCESSES = 4


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["redis", "mysql", "redis_sharded"])
def test_four_processes_drain_each_job_exactly_once(servers: None, setup: str, queue_name: str) -> None:
    settings = settings_for(setup)
    with JobService.from_settings(settings, source="producer") as client:
        client.create_queue(queue_name)
        descriptors: list[str] = []
        for start in range(0, JOBS, 500):
            descriptors += client.enqueue(
                queue_name, [Job(b"job-%d" % i, priority=1 + i % 3) for i in range(start, start + 500)]
            )
        assert len(set(descriptors)) == JOBS

        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
            ready = manager.Barrier(PROCESSES)
            futures = [pool.submit(drain, settings, queue_name, 50, 6, str(i), ready) for i in range(PROCESSES)]
            results = [f.result(timeout=600) for f in futures]

        everything = [d for r in results for d in r]
        assert len(everything) == len(set(everything)), "a job was handed out twice"
        assert set(everything) == set(descriptors)
        assert all(len(r) > JOBS // (PROCESSES * 10) for r in results), [len(r) for r in results]
        assert client.count(queue_name, "succeeded") == JOBS
        for state in ("pending", "running", "failed"):
            assert client.count(queue_name, state) == 0
