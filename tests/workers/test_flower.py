"""Flower, started as a process, sees the workers and the tasks (received,
started, succeeded, failed) through its HTTP API: events and remote
control travel over the Redis bus."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from celery import Celery

from tests.servers import free_port
from tests.workers.celery_tasks import qname
from tests.workers.harness import Processes, wait_for_workers, wait_until


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.timeout(90)
def test_flower_reports_workers_and_tasks(app: Celery, procs: Processes) -> None:
    port = free_port()
    procs.start("flower", ["flower", "--address=127.0.0.1", f"--port={port}"],
                extra_env={"FLOWER_UNAUTHENTICATED_API": "true"})
    procs.worker("fl", [qname("w_flower_ok"), qname("w_flower_fail")], 2, "-E")
    wait_for_workers(app, ["fl"])

    def flower_up() -> bool:
        try:
            _get(port, "/api/workers?refresh=1")
            return True
        except OSError:
            return False

    wait_until(flower_up, 30, interval=0.5, what="Flower's API")
    ok = [app.tasks["tests.w_flower_ok"].delay(i) for i in range(5)]
    bad = [app.tasks["tests.w_flower_fail"].delay() for _ in range(2)]
    ids = {r.id: "SUCCESS" for r in ok} | {r.id: "FAILURE" for r in bad}

    def tasks_seen() -> dict[str, Any] | None:
        tasks = _get(port, "/api/tasks")
        done = {i: t for i, t in tasks.items() if i in ids and t.get("state") == ids[i]}
        return tasks if len(done) == len(ids) else None

    tasks = wait_until(tasks_seen, 40, interval=0.5, what="Flower to see every task finish")
    for task_id, state in ids.items():
        task = tasks[task_id]
        assert task["received"] and task["started"], task
        assert task["succeeded" if state == "SUCCESS" else "failed"], task
        assert task["worker"].startswith("fl@")

    workers = wait_until(lambda: _get(port, "/api/workers?refresh=1"), 20, interval=0.5, what="workers in Flower")
    name = next(n for n in workers if n.startswith("fl@"))
    assert qname("w_flower_ok") in {q["name"] for q in workers[name].get("active_queues", [])}
    assert any(t.startswith("tests.w_flower") for t in workers[name].get("registered", []))
