"""Flower, started as the Procfile starts it, sees the workers and the tasks
(received, started, succeeded, failed) through its HTTP API: events and
remote control travel over the Redis bus. It is authenticated: its API
publishes tasks, so a request without the credentials, or a cross-site one
with them, publishes nothing, and the password never shows in ``ps``."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from pinlater import JobState
from pinlater.service import JobService
from tests.servers import REPO, free_port
from tests.support.waits import wait_until
from tests.workers.celery_tasks import qname
from tests.workers.harness import Processes, procfile_line, wait_for_workers

SHIPPED_PORT = "--port=5555"
# What the environment of an operator's shell may hold, and the shipped line must not rely on.
UNSET = ("PINLATER_FLOWER_AUTH_FILE", "FLOWER_BASIC_AUTH", "FLOWER_UNAUTHENTICATED_API")


class Flower:
    def __init__(self, port: int, proc: subprocess.Popen[bytes], home: Path) -> None:
        self.port, self.proc, self.home = port, proc, home

    def credentials(self) -> str:
        """The user:password the shipped line made on this fresh machine."""
        path = self.home / ".var" / "flower-auth"
        assert path.exists(), "Flower started without making or reading its credentials"
        [pair] = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
        return pair

    def request(self, path: str, *, method: str = "GET", body: Any = None, auth: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers=dict(headers or {}))
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if auth is not None:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get_json(self, path: str) -> Any:
        status, body = self.request(path, auth=self.credentials())
        assert status == 200, (status, body)
        return json.loads(body)


def start_shipped_flower(procs: Processes, tmp_path: Path) -> Flower:
    """The Procfile's flower line on a fresh machine (a working directory
    with no .var), on a free port."""
    line = procfile_line("flower")
    assert SHIPPED_PORT in line, line
    port = free_port()
    env = {k: v for k, v in procs.env.items() if k not in UNSET}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    home = tmp_path / "fresh"
    home.mkdir()
    proc = procs.start_shell("flower", line.replace(SHIPPED_PORT, f"--port={port}"), env, home)
    flower = Flower(port, proc, home)

    def up() -> bool:
        try:
            return flower.request("/healthcheck")[0] == 200
        except OSError:
            return False

    wait_until(up, 30, interval=0.5, what=lambda: f"Flower to serve:\n{procs.log('flower')}")
    return flower


@pytest.mark.timeout(90)
def test_flower_reports_workers_and_tasks(app: Celery, procs: Processes, tmp_path: Path) -> None:
    flower = start_shipped_flower(procs, tmp_path)
    procs.worker("fl", [qname("w_flower_ok"), qname("w_flower_fail")], 2, "-E")
    wait_for_workers(app, ["fl"])
    wait_until(lambda: flower.get_json("/api/workers?refresh=1"), 30, interval=0.5, what="Flower's API")
    ok = [app.tasks["tests.w_flower_ok"].delay(i) for i in range(5)]
    bad = [app.tasks["tests.w_flower_fail"].delay() for _ in range(2)]
    ids = {r.id: "SUCCESS" for r in ok} | {r.id: "FAILURE" for r in bad}

    def tasks_seen() -> dict[str, Any] | None:
        tasks = flower.get_json("/api/tasks")
        done = {i: t for i, t in tasks.items() if i in ids and t.get("state") == ids[i]}
        return tasks if len(done) == len(ids) else None

    tasks = wait_until(tasks_seen, 40, interval=0.5, what="Flower to see every task finish")
    for task_id, state in ids.items():
        task = tasks[task_id]
        assert task["received"] and task["started"], task
        assert task["succeeded" if state == "SUCCESS" else "failed"], task
        assert task["worker"].startswith("fl@")

    workers = wait_until(lambda: flower.get_json("/api/workers?refresh=1"), 20, interval=0.5,
                         what="workers in Flower")
    name = next(n for n in workers if n.startswith("fl@"))
    assert qname("w_flower_ok") in {q["name"] for q in workers[name].get("active_queues", [])}
    assert any(t.startswith("tests.w_flower") for t in workers[name].get("registered", []))


@pytest.mark.timeout(60)
def test_the_shipped_flower_publishes_only_for_its_authenticated_same_site_callers(
    procs: Processes, service: JobService, tmp_path: Path
) -> None:
    flower = start_shipped_flower(procs, tmp_path)
    queue = qname("w_flower_ok")
    service.create_queue(queue)
    send = "/api/task/send-task/tests.w_flower_ok"
    body = {"args": [21], "queue": queue}

    status, _ = flower.request(send, method="POST", body=body)
    assert status == 401, "Flower published a task for a caller with no credentials"
    user, _, password = flower.credentials().partition(":")
    assert flower.request(send, method="POST", body=body, auth=f"{user}:wrong-{password}")[0] == 401
    # A page of another site, in a browser that holds the credentials.
    good = f"{user}:{password}"
    assert flower.request(send, method="POST", body=body, auth=good,
                          headers={"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert flower.request(send, method="POST", body=body, auth=good,
                          headers={"Origin": "http://attacker.example"})[0] == 403
    assert service.count(queue, JobState.PENDING) == 0, "a refused request published a task"

    status, answer = flower.request(send, method="POST", body=body, auth=good)
    assert status == 200, answer
    assert json.loads(answer)["task-id"]
    assert service.count(queue, JobState.PENDING) == 1

    assert stat.S_IMODE((flower.home / ".var" / "flower-auth").stat().st_mode) == 0o600
    group = os.getpgid(flower.proc.pid)
    argv = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in _pids() if _pgid(pid) == group]
    assert argv and not any(password.encode() in a for a in argv), "the password shows in ps"
    assert "basic auth from .var/flower-auth (made now: user admin)" in procs.log("flower")


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# -- the launcher's refusals ---------------------------------------------------------------
def _launch(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in UNSET}
    return subprocess.run([sys.executable, "-m", "workers.flower", *args], env={**base, **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(60)
def test_flower_without_credentials_does_not_start_and_says_what_to_set(tmp_path: Path) -> None:
    port = str(free_port())
    done = _launch([f"--port={port}"])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "PINLATER_FLOWER_AUTH_FILE" in done.stderr, done.stderr

    shown = _launch(["--basic-auth=admin:hunter2", f"--port={port}"])
    assert shown.returncode == 2 and "hunter2" not in shown.stderr and "ps" in shown.stderr, shown.stderr

    bad = tmp_path / "auth"
    bad.write_text("# two users\nadmin:s3cret\noperator\n")
    refused = _launch([f"--port={port}"], PINLATER_FLOWER_AUTH_FILE=str(bad))
    assert refused.returncode == 2 and "s3cret" not in refused.stderr, refused.stderr
    assert "PINLATER_FLOWER_AUTH_FILE, line 3: expected user:password" in refused.stderr
