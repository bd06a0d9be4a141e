"""A batch of 1,000 jobs over two shards, run by worker processes that fail
jobs, leave some to their claims' expiry and are SIGKILLed at random, with
a monitor beside them: the callback runs exactly once, after every job
ended, with the counts the shards hold. Random, from a seed it prints
(PINLATER_BATCH_SEED runs one again)."""

from __future__ import annotations

import multiprocessing
import os
import random
import time

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.operators import Monitor
from tests.integration.procs import batch_worker
from tests.support.stores import settings_for

JOBS = 1_000
WORKERS = 3
LIMIT_S = 120


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["redis_sharded", "mysql_sharded"])
def test_the_callback_runs_once_whatever_the_workers_do(servers: None, setup: str, queue_name: str) -> None:
    seed = int(os.environ.get("PINLATER_BATCH_SEED") or random.randrange(2**32))
    print(f"\nbatch chaos seed {seed} ({setup}); PINLATER_BATCH_SEED={seed} runs it again")
    rng = random.Random(seed)
    settings = settings_for(setup)
    done_q = queue_name + "_done"
    context = multiprocessing.get_context("spawn")
    with JobService.from_settings(settings, source="batch-chaos") as client:
        client.create_queue(queue_name, claim_timeout_ms=300)
        client.create_queue(done_q)
        batch = client.create_batch(done_q, Job(b"callback"), description="chaos")
        stored: list[str] = []
        # Each enqueue picks its shard at random: 50 of them miss a shard
        # with a chance of 2**-49 (10 missed one once in 512 runs).
        for start in range(0, JOBS, 20):
            stored += client.enqueue(queue_name, [Job(b"job %d" % i, attempts_allowed=rng.randint(1, 3))
                                                  for i in range(start, start + 20)], batch=batch)
        assert len(set(stored)) == JOBS and client.seal_batch(batch).state == "sealed"
        assert {d.split(":")[1] for d in stored} == {f"s{s}" for s in client.operators.shard_ids()}

        monitor = Monitor(client.operators, interval_s=0.2, queues=[queue_name, done_q])
        monitor.start_thread()
        workers = [context.Process(target=batch_worker, args=(settings, queue_name, rng.randrange(2**32), 0.05, 0.2),
                                   daemon=True) for _ in range(WORKERS)]
        for w in workers:
            w.start()
        callbacks: list[str] = []
        kills = 0
        deadline = time.monotonic() + LIMIT_S
        try:
            while time.monotonic() < deadline:
                callbacks += [j.descriptor for j in client.dequeue(done_q, 10)]
                if callbacks and client.batch_status(batch).state == "released":
                    break
                if rng.random() < 0.3:  # a worker dies mid-run, SIGKILL; another starts
                    victim = rng.randrange(len(workers))
                    workers[victim].kill()
                    workers[victim].join()
                    kills += 1
                    workers[victim] = context.Process(target=batch_worker, daemon=True, args=(
                        settings, queue_name, rng.randrange(2**32), 0.05, 0.2))
                    workers[victim].start()
                time.sleep(0.1)
            # Long enough for a second release to show: the monitor passes every 0.2 s.
            time.sleep(1.5)
            callbacks += [j.descriptor for j in client.dequeue(done_q, 10)]
        finally:
            for w in workers:
                w.kill()
                w.join()
            monitor.stop()
        status = client.batch_status(batch)
        assert len(callbacks) == 1, f"seed {seed}: the callback ran {len(callbacks)} times"
        assert callbacks == [status.callback]
        # The oracle: how the shards say every job ended.
        found = client.lookup(stored)
        states = [found[d].state if d in found else JobState.FAILED for d in stored]
        assert JobState.PENDING not in states and JobState.RUNNING not in states, f"seed {seed}"
        succeeded = states.count(JobState.SUCCEEDED)
        assert (status.state, status.total, status.succeeded, status.failed) == (
            "released", JOBS, succeeded, JOBS - succeeded), f"seed {seed}"
        print(f"{kills} workers killed; {succeeded} succeeded, {JOBS - succeeded} failed; one callback")
        client.ack(done_q, succeeded=[Ack(callbacks[0])])
