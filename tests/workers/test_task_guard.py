"""A producer does not choose which task code a worker runs: a job whose
message names a task its queue does not route to (another registered task,
Celery's ``celery.group``, a protocol 1 body naming one), or carries a
canvas its task does not accept (callbacks, errbacks, a chain) is never run; it ends
FAILED at once with a ``refused: ...`` status, while the queue's own task
still runs, from published messages and from raw bodies, in-process and
through the Thrift server."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import pytest
import redis
from celery import Celery

from pinlater import Job, JobState
from pinlater.client_api import PinLaterClient
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from tests.support.waits import wait_until
from tests.workers.celery_tasks import RUN, key, qname
from tests.workers.harness import Processes, wait_for_workers
from workers import registry, task_guard
from workers.message_format import decode, encode, raw_message

REDIS_AND_THRIFT = pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
CONFIG_MODULE = "tests.workers.celery_config"
# In every refused body: the worker's log must never show it.
MARKER = "body-marker-" + uuid.uuid4().hex[:8]
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def celery_body(task: str, args: list[Any], embed: dict[str, Any] | None = None) -> bytes:
    """A Celery protocol 2 message for ``task`` as a producer could store it."""
    task_id = str(uuid.uuid4())
    message = {"headers": {"task": task, "id": task_id}, "properties": {"correlation_id": task_id},
               "content-type": "application/json", "content-encoding": "utf-8"}
    return encode(message, json.dumps([args, {}, {**_EMBED, **(embed or {})}]).encode())


def victim_signature(note: str) -> dict[str, Any]:
    return {"task": "tests.w_victim", "args": [note], "kwargs": {}, "options": {}, "subtask_type": None,
            "immutable": True}


def group_body(note: str) -> bytes:
    """``celery.group`` of one signature of tests.w_victim: run, it publishes
    that signature under the worker's identity."""
    group_id = str(uuid.uuid4())
    signature: dict[str, Any] = {"task": "tests.w_victim", "args": [note], "kwargs": {}, "options": {},
                 "subtask_type": None, "immutable": False}
    return celery_body("celery.group", [[signature], [[group_id, None], None], group_id, []])


def protocol1_body(note: str) -> bytes:
    """A message with no task header: Celery reads the task from the body."""
    body = {"task": "tests.w_victim", "id": str(uuid.uuid4()), "args": [note], "kwargs": {}}
    return encode({"headers": {}, "properties": {}, "content-type": "application/json",
                   "content-encoding": "utf-8"}, json.dumps(body).encode())


@REDIS_AND_THRIFT
@pytest.mark.timeout(120)
def test_a_worker_runs_only_the_tasks_each_queue_routes_to(
    app: Celery, service: JobService, env: dict[str, str], procs: Processes, results: redis.Redis[bytes]
) -> None:
    guard, victim, default = qname("w_guard"), qname("w_victim"), f"celery_{RUN}"
    app.tasks["tests.w_guard"], app.tasks["tests.w_victim"]  # their queues get their tasks' config
    for queue in (guard, victim, default):
        service.create_queue(queue)
    remote = env.get("PINLATER_SERVERS")
    producer: PinLaterClient = ThriftClient([remote], source="producer") if remote else service
    try:
        refused = dict(zip(
            ["named", "group", "protocol1"],
            producer.enqueue(guard, [Job(celery_body("tests.w_victim", [f"named {MARKER}"])),
                                     Job(group_body(f"group {MARKER}")),
                                     Job(protocol1_body(f"protocol 1 {MARKER}"))]),
            strict=True,
        ))
        [refused["default group"]] = producer.enqueue(default, [Job(group_body(f"default group {MARKER}"))])
        # The queue's own task, carrying signatures the worker would publish
        # on success, on failure or as the chain's next step.
        canvas = dict(zip(
            ["callbacks", "errbacks", "chain"],
            producer.enqueue(guard, [
                Job(celery_body("tests.w_guard", [f"link {MARKER}"], {"callbacks": [victim_signature("link")]})),
                Job(celery_body("tests.w_guard", [f"errback {MARKER}"],
                                {"errbacks": [victim_signature("errback")]})),
                Job(celery_body("tests.w_guard", [f"chain {MARKER}"], {"chain": [victim_signature("chain")]})),
            ]),
            strict=True,
        ))
        # Celery's default queue is where send_task by name lands: it runs the task a message names.
        [named_on_default] = producer.enqueue(default, [Job(celery_body("tests.w_victim", ["default"]))])
        [raw] = producer.enqueue(guard, [Job(b"raw body")])
    finally:
        if remote:
            producer.close()
    published = app.tasks["tests.w_guard"].delay("published").descriptor

    procs.start("guard", ["worker", "-n", "guard@%h", "-Q", ",".join([guard, victim, default]), "-c", "1",
                          "--without-gossip", "--without-mingle", "-l", "info"],
                {"CELERY_CONFIG_MODULE": CONFIG_MODULE})
    wait_for_workers(app, ["guard"])

    def final() -> dict[str, Any] | None:
        jobs = service.lookup([*refused.values(), *canvas.values(), raw, published, named_on_default])
        done = all(j.state in (JobState.SUCCEEDED, JobState.FAILED) for j in jobs.values())
        return jobs if done else None

    jobs = wait_until(final, 40, what=lambda: f"every job to end:\n{procs.log('guard')}")
    assert sorted(results.lrange(key("runs:w_guard"), 0, -1)) == [b"published", b"raw body"]
    assert results.lrange(key("runs:w_victim"), 0, -1) == [b"default"], "a refused message ran"
    assert {d: jobs[d].state for d in (raw, published, named_on_default)} == dict.fromkeys(
        (raw, published, named_on_default), JobState.SUCCEEDED)
    expected = {
        "named": f"refused: queue {guard} runs tests.w_guard only, not 'tests.w_victim'",
        "group": f"refused: queue {guard} runs tests.w_guard only, not 'celery.group'",
        "protocol1": "refused: not a Celery task message (protocol 2 names its task in its headers)",
        "default group": "refused: 'celery.group' runs what its message names, under the worker's identity",
    }
    for what, descriptor in refused.items():
        job = jobs[descriptor]
        # Ended at once: its one attempt spent by the refusal, never retried.
        assert (job.state, job.custom_status, job.attempts_allowed, job.attempts_remaining) == (
            JobState.FAILED, expected[what], 1, 0), what
    assert service.count(victim, JobState.PENDING) + service.count(victim, JobState.SUCCEEDED) == 0, \
        "celery.group or a canvas published under the worker's identity"
    for what, descriptor in canvas.items():
        job = jobs[descriptor]
        assert (job.state, job.attempts_allowed, job.attempts_remaining) == (JobState.FAILED, 1, 0), what
        assert "refused: its message carries callbacks, errbacks, a chain or a chord, which tests.w_guard " \
            "does not accept" in job.custom_status, (what, job.custom_status)

    log = procs.log("guard")
    assert MARKER not in log, "a refused body reached the worker's log"
    for descriptor in refused.values():
        assert log.count(f"job {descriptor} not run: refused: ") == 1, log
    host = f"guard@{socket.gethostname()}"
    stats = (app.control.inspect(timeout=2.0, destination=[host]).stats() or {})[host]
    assert stats["pinlater_refused"] == {
        guard: {"tests.w_victim": 1, "celery.group": 1, "(none)": 1},
        default: {"celery.group": 1},
    }


# -- the rule itself -------------------------------------------------------------------------
def _message(task: Any) -> Any:
    headers = {"id": "x"} if task is None else {"task": task, "id": "x"}
    stored = decode(encode({"headers": headers, "properties": {}}, b"[[], {}, {}]"))
    assert stored is not None
    return stored


def test_a_queue_a_task_owns_runs_that_task_only() -> None:
    queue = f"w_guard_rule_{uuid.uuid4().hex[:6]}"
    registry.register(queue, registry.QueueSpec("tests.rule_owner"))
    assert task_guard.refusal(queue, _message("tests.rule_owner")) is None
    assert task_guard.refusal(queue, raw_message(b"body", registry.task_for_queue(queue), "d")) is None
    assert task_guard.refusal(queue, _message("tests.w_pub")) == \
        f"refused: queue {queue} runs tests.rule_owner only, not 'tests.w_pub'"
    assert task_guard.refusal(queue, _message("celery.backend_cleanup")) is not None


def test_a_queue_no_task_owns_runs_named_tasks_but_not_celerys_canvas() -> None:
    queue = f"unowned_{uuid.uuid4().hex[:6]}"
    assert task_guard.refusal(queue, _message("tests.w_pub")) is None
    assert task_guard.refusal(queue, _message("celery.backend_cleanup")) is None
    for builtin in ("celery.group", "celery.chain", "celery.chord", "celery.chord_unlock", "celery.map",
                    "celery.starmap", "celery.chunks"):
        assert task_guard.refusal(queue, _message(builtin)) == \
            f"refused: {builtin!r} runs what its message names, under the worker's identity"


def test_a_message_that_names_no_task_is_refused_and_names_are_shown_short() -> None:
    queue = f"unowned_{uuid.uuid4().hex[:6]}"
    for task in (None, "", 42, ["celery.group"]):
        assert task_guard.refusal(queue, _message(task)) == \
            "refused: not a Celery task message (protocol 2 names its task in its headers)"
    plain = decode(encode({"headers": {"hello": "world"}, "properties": {}}, b"{}"))
    assert plain is not None and task_guard.refusal(queue, plain) is not None
    long_name = "celery." + "x\n" * 200
    reason = task_guard.refusal(queue, _message(long_name))
    assert reason is not None and "\n" not in reason and len(reason) < 200
