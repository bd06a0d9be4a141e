"""Helpers of the dashboard tests: settings, the workload, backend counts.

The cluster uses Redis dbs of its own (3: shards on 16379 and 16380, 4:
control store on 16379), flushed at the start, so the page shows only what
these tests put there, whatever other suites left behind.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from dashboards.server import Dashboard
from pinlater import Ack, DequeuedJob, Job, JobService, JobState
from pinlater.queue_config import QueueConfig
from pinlater.settings import Settings, hash_secret, parse_shards
from tests.servers import REDIS_PORTS, redis_db, redis_url

SHARD_DB, CONTROL_DB = redis_db(3), redis_db(4)
TOKEN = "test-operator-token"
# The dashboard's keys for the five job counts, and how to ask the backend for each.
STATE_QUERIES = {
    "pending_now": (JobState.PENDING, False),
    "pending_future": (JobState.PENDING, True),
    "running": (JobState.RUNNING, False),
    "succeeded": (JobState.SUCCEEDED, False),
    "failed": (JobState.FAILED, False),
}


def dashboard_settings(**overrides: object) -> Settings:
    fields: dict[str, Any] = {
        "shards": parse_shards(",".join(
            f"r{i + 1}={redis_url(port, SHARD_DB)}" for i, port in enumerate(REDIS_PORTS)
        )),
        "control_url": redis_url(REDIS_PORTS[0], CONTROL_DB),
        "health_probe_interval_s": 0.2,
        "config_ttl_s": 0.2,
        "socket_timeout_s": 2.0,
        "dashboard_token_sha256": hash_secret(TOKEN),
    }
    fields.update(overrides)
    return Settings(**fields)


# What an older version (Python's json.dumps writes NaN and Infinity) or a
# person may have left in the control store.
ODD_RATES = {"nan": "NaN", "inf": "Infinity", "neg_inf": "-Infinity", "overflow": "1e309", "negative": "-5"}
UNREADABLE = "{this is not json"


def config_text(name: str, rate_token: str) -> str:
    text = QueueConfig(name, priorities=2).to_json()
    assert '"max_dequeue_rate": null' in text
    return text.replace('"max_dequeue_rate": null', f'"max_dequeue_rate": {rate_token}')


def plant_odd_queues(svc: JobService, write_raw: Callable[[str, str], object]) -> dict[str, str]:
    """Queues created properly (so their storage exists on every shard), then
    their stored config overwritten. Returns queue name -> what was stored."""
    tag = uuid.uuid4().hex[:6]
    planted = {f"odd_{label}_{tag}": config_text(f"odd_{label}_{tag}", token) for label, token in ODD_RATES.items()}
    planted[f"odd_unreadable_{tag}"] = UNREADABLE
    for name, text in planted.items():
        svc.create_queue(name, priorities=2)
        write_raw(name, text)
    return planted


def restore(svc: JobService, planted: dict[str, str]) -> None:
    # Leave valid (empty) queues behind: other tests list every queue.
    for name in planted:
        svc.core.control.put_queue(QueueConfig(name, priorities=2))


def backend_counts(svc: JobService, queue: str, priority: int | None = None) -> dict[str, int]:
    """The truth, straight from the job service."""
    return {key: svc.count(queue, state, priority=priority, future=future)
            for key, (state, future) in STATE_QUERIES.items()}



@dataclass
class Workload:
    queue: str
    enqueued: list[str] = field(default_factory=list)
    dequeued: int = 0
    succeeded: int = 0
    failed_final: int = 0
    retried_later: int = 0


def run_workload(svc: JobService, queue: str, scale: int = 1) -> Workload:
    """~3,000 jobs (times ``scale``/1): some scheduled for later, some failing
    for good (one attempt), some failing with a retry an hour away, some left
    running, the rest pending."""
    w = Workload(queue)
    svc.create_queue(queue, priorities=3, claim_timeout_ms=600_000)
    later = int(time.time() * 1000) + 3_600_000
    groups: list[tuple[int, Callable[[int], Job]]] = [
        (2000 // scale, lambda i: Job(b"once-%d" % i, priority=1 + i % 3, attempts_allowed=1)),
        (700 // scale, lambda i: Job(b"retry-%d" % i, priority=1 + i % 2, attempts_allowed=5)),
        (300 // scale, lambda i: Job(b"later-%d" % i, priority=3, run_after_ms=later)),
    ]
    for n, make in groups:
        for start in range(0, n, 50):  # many calls: each picks a shard at random
            w.enqueued += svc.enqueue(queue, [make(i) for i in range(start, min(n, start + 50))])
    jobs: list[DequeuedJob] = []
    while len(jobs) < 1600 // scale:
        jobs += svc.dequeue(queue, min(500, 1600 // scale - len(jobs)))
    w.dequeued = len(jobs)
    keep_running = 200 // scale
    done, running = jobs[:-keep_running], jobs[-keep_running:]
    failures = [j for i, j in enumerate(done) if i % 5 == 0]
    successes = [j for i, j in enumerate(done) if i % 5 != 0]
    for start in range(0, len(successes), 500):  # ACKs per call are capped (max_jobs_per_call)
        svc.ack(queue, succeeded=[Ack(j.descriptor) for j in successes[start : start + 500]])
    # An explicit hour-long delay keeps retried jobs "pending later" for the whole test.
    svc.ack(queue, failed=[Ack(j.descriptor, "boom: ValueError", retry_delay_ms=3_600_000) for j in failures])
    w.succeeded = len(successes)
    w.failed_final = sum(1 for j in failures if j.body.startswith(b"once-"))
    w.retried_later = len(failures) - w.failed_final
    assert len(running) == keep_running
    svc.operators.flush_counters()  # events reach the control store now, not within a second
    return w


@dataclass
class Cluster:
    svc: JobService
    dashboard: Dashboard
    work: Workload

    @property
    def url(self) -> str:
        return self.dashboard.url


def flush_dashboard_dbs() -> None:
    for port in REDIS_PORTS:
        redis.Redis.from_url(redis_url(port, SHARD_DB)).flushdb()
    redis.Redis.from_url(redis_url(REDIS_PORTS[0], CONTROL_DB)).flushdb()


# Events of ``run_known_work``, for the rate charts.
WORK = {"enqueued": 30, "dequeued": 20, "succeeded": 12, "failed": 8}


def clear_of_minute_end(margin_s: float = 10.0) -> None:
    """Sleep into the next minute if this one ends within ``margin_s``, so
    that a short workload happens within one minute."""
    left = 60 - time.time() % 60
    if left < margin_s:
        time.sleep(left + 0.1)


def run_known_work(svc: JobService, queue: str) -> None:
    """A new queue with the events of ``WORK``, flushed to the control store.
    Its jobs are then deleted: the events stay (they are all the charts
    read), and the shards' totals, which other tests check against the
    workload queue alone, stay as they were."""
    svc.create_queue(queue, priorities=1)
    svc.enqueue(queue, [Job(b"x", attempts_allowed=1)] * WORK["enqueued"])
    jobs = svc.dequeue(queue, WORK["dequeued"])
    ok = WORK["succeeded"]
    svc.ack(queue, succeeded=[Ack(j.descriptor) for j in jobs[:ok]], failed=[Ack(j.descriptor) for j in jobs[ok:]])
    svc.operators.flush_counters()
    for state in ("pending", "succeeded", "failed"):
        svc.delete_jobs(queue, state)
    assert backend_counts(svc, queue) == dict.fromkeys(STATE_QUERIES, 0)
