"""Keyed jobs drained by two processes at once, one job a call: no dequeue
comes back empty while jobs are due, however their calls interleave with
the other's admission of newcomers into lanes (on MySQL a dequeue that read
the lanes before another's admission committed and the newcomers after it
found neither, and claimed nothing)."""

from __future__ import annotations

import threading

import pytest

from pinlater import Ack, Job, JobService, JobState
from tests.support.stores import settings_for

JOBS = 400


@pytest.mark.parametrize("setup", ["redis", "mysql"])
@pytest.mark.parametrize("limits", [False, True], ids=["keys", "key-limits"])
def test_two_drainers_never_find_nothing_while_keyed_jobs_are_due(
    servers: None, setup: str, limits: bool, queue_name: str
) -> None:
    settings = settings_for(setup)
    with JobService.from_settings(settings, source="setup") as client:
        client.create_queue(queue_name)
        if limits:
            client.update_queue(queue_name, key_max_running=1000, key_rate=1e6)
        # One at a time: each enqueue's jobs are newcomers for a while on MySQL.
        for i in range(JOBS):
            client.enqueue(queue_name, [Job(b"x", key=f"k{i % 50}")])
        empty: list[tuple[str, int]] = []
        done = [0]
        lock = threading.Lock()
        start = threading.Barrier(2)

        def drain(name: str) -> None:
            with JobService.from_settings(settings, source=name) as worker:
                start.wait(30)
                acks: list[Ack] = []
                while True:
                    got = worker.dequeue(queue_name, 1, succeeded=acks)
                    acks = [Ack(j.descriptor, claim=j.claim) for j in got]
                    with lock:
                        done[0] += len(got)
                        if not got:
                            if done[0] < JOBS:
                                empty.append((name, done[0]))
                            break
                if acks:
                    worker.ack(queue_name, succeeded=acks)

        threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        # Both end only once the other has taken the last jobs.
        assert done[0] == JOBS
        assert all(n >= JOBS - 1 for _, n in empty), empty
        assert client.count(queue_name, JobState.SUCCEEDED) == JOBS
