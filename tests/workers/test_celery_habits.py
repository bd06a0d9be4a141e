"""Everyday Celery habits on ``pinlater://``: ``send_task`` from a process
that imports no task module reaches a default worker (one started without
``-Q`` consumes Celery's default queue); ``send_task`` results carry the
job's descriptor; ``@shared_task`` and ``current_app`` publish to PinLater
in any thread of a process that imports ``workers.app``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import redis
from celery import Celery
from kombu.entity import Exchange, Queue

from pinlater import JobState
from pinlater.service import JobService
from tests.servers import REPO
from tests.support.waits import wait_until
from tests.workers.celery_tasks import RUN, key, qname
from tests.workers.harness import Processes

STORES = pytest.mark.parametrize("backend", ["redis", "mysql"], indirect=True)
CONFIG_MODULE = "tests.workers.celery_config"

# A client that names a task it does not import, with no queue: once plainly,
# once declaring nothing (so no exchange of this process routes it).
SEND_TASK = """
import json, sys
from workers.app import app
plain = app.send_task("tests.w_pub", args=["no queue"])
undeclared = app.send_task("tests.w_pub", args=["no queue, nothing declared"], declare=[])
print(json.dumps({
    "descriptors": [plain.descriptor, undeclared.descriptor],
    "default_queue": app.conf.task_default_queue,
    "task_modules": sorted(m for m in sys.modules if m == "tests.workers.celery_tasks" or m.startswith("tasks")),
}))
"""

# A shared task and current_app from the main thread and from another one,
# after an app of make_app's (which must not become the current one).
SHARED_TASK = """
import json, threading
import celery
from workers.app import make_app
from workers.builtin_tasks import noop
other = make_app("not_the_default", imports=())
out = {}
def publish(where):
    try:
        out[where] = {"descriptor": noop.delay().descriptor, "app": celery.current_app.main,
                      "broker_url": celery.current_app.conf.broker_url}
    except Exception as exc:
        out[where] = {"error": repr(exc)}
publish("main")
thread = threading.Thread(target=publish, args=("thread",))
thread.start()
thread.join()
print(json.dumps(out))
"""


def run_client(env: dict[str, str], script: str, **extra: str) -> Any:
    """Runs ``script`` in a fresh Python process with the test's setup (and
    no task modules to import); returns the JSON of its last line."""
    child_env = {k: v for k, v in env.items() if k != "PINLATER_CELERY_IMPORTS"}
    child_env.update(extra)
    proc = subprocess.run([sys.executable, "-c", script], env=child_env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"client failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@STORES
@pytest.mark.timeout(90)
def test_send_task_without_a_queue_runs_on_a_default_worker(
    env: dict[str, str], service: JobService, procs: Processes, results: redis.Redis[bytes]
) -> None:
    config = {"CELERY_CONFIG_MODULE": CONFIG_MODULE}
    procs.start("default", ["worker", "-n", "default@%h", "-P", "solo", "--without-gossip",
                            "--without-mingle", "-l", "info"], config)
    out = run_client(env, SEND_TASK, **config)

    default_queue = f"celery_{RUN}"
    assert out["default_queue"] == default_queue
    assert out["task_modules"] == [], "the client imported task modules"
    descriptors = out["descriptors"]
    assert all(d and d.startswith(default_queue + ":") for d in descriptors), descriptors
    assert set(service.lookup(descriptors)) == set(descriptors), "the service does not know the jobs"

    def ran() -> bool:
        return all(results.hget(key("runs:w_pub"), d) == b"1" for d in descriptors)

    try:
        wait_until(ran, 30, what="the default worker to run the jobs")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.log('default')}") from None
    wait_until(lambda: all(i.state == JobState.SUCCEEDED for i in service.lookup(descriptors).values()),
               10, what="the jobs to be ACKed")


@STORES
@pytest.mark.timeout(30)
def test_send_task_to_a_named_queue_returns_the_job_descriptor(app: Celery, service: JobService) -> None:
    queue = qname("w_named")
    result = app.send_task("tests.w_pub", args=[1], queue=queue)
    assert result.descriptor and result.descriptor.startswith(queue + ":"), result.descriptor
    assert service.lookup([result.descriptor])[result.descriptor].state == JobState.PENDING

    # A task published through its queue's exchange (not the anonymous one)
    # is routed by the exchange's bindings, so the publish declares them.
    task = app.tasks["tests.w_pub"]
    via_exchange = task.apply_async((2,), exchange=task.pinlater_queue, routing_key=task.pinlater_queue)
    assert via_exchange.descriptor and via_exchange.descriptor.startswith(task.pinlater_queue + ":"), \
        "the publish went to no task queue"
    assert service.lookup([via_exchange.descriptor])[via_exchange.descriptor].state == JobState.PENDING


@STORES
@pytest.mark.timeout(60)
def test_shared_tasks_and_current_app_use_pinlater_in_every_thread(
    env: dict[str, str], service: JobService
) -> None:
    out = run_client(env, SHARED_TASK)
    assert set(out) == {"main", "thread"}
    for where, seen in out.items():
        assert "error" not in seen, f"{where}: {seen['error']}"
        assert seen["app"] == "workers", f"{where}: current_app is {seen['app']}"
        assert seen["broker_url"].startswith("pinlater://"), f"{where}: {seen['broker_url']}"
        assert seen["descriptor"].startswith("celery_noop:"), f"{where}: {seen['descriptor']}"
    descriptors = [seen["descriptor"] for seen in out.values()]
    assert set(service.lookup(descriptors)) == set(descriptors), "the jobs are not in celery_noop"


@STORES
@pytest.mark.timeout(30)
def test_a_celery_queue_with_max_priority_keeps_every_priority_apart(app: Celery, service: JobService) -> None:
    """``task_queues`` with ``Queue(max_priority=5)``: the queue gets six
    priorities and Celery priority p lands in PinLater priority p + 1, also
    for a PinLaterTask, whose publishes declare nothing."""
    queue = qname("w_prio")
    service.delete_queue(queue, "secret")
    exchange = Exchange(queue, type="direct")  # type: ignore[no-untyped-call]
    app.conf.task_queues = [Queue(queue, exchange, routing_key=queue, max_priority=5)]  # type: ignore[no-untyped-call]
    task = app.tasks["tests.w_pub"]
    descriptors = [task.apply_async((p,), queue=queue, priority=p).descriptor for p in range(6)]
    assert service.queue_config(queue, fresh=True).priorities == 6
    assert [d.split(":")[2] for d in descriptors] == [f"p{p + 1}" for p in range(6)]
