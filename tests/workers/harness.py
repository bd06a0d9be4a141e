# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Real Celery worker processes (and Flower) for the worker tests.

Workers run ``celery -A workers.app worker`` with the environment of a test
setup (``settings_for``): the same shards and control store as the test's
``JobService``, a bus prefix of their own, and this package's tasks.
Every process is started in its own session and killed with its group at
the end, whatever happened."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from celery import Celery

from pinlater.settings import Settings
from tests.servers import REPO
from tests.support.stores import settings_for
from tests.support.waits import wait_until
from workers.app import make_app

TASKS_MODULE = "tests.workers.celery_tasks"


def worker_env(setup: str, bus_prefix: str) -> dict[str, str]:
    settings: Settings = settings_for(setup)
    env = dict(os.environ)
    env.update(
        PINLATER_SHARDS=",".join(f"{s.id}={s.url}" for s in settings.shards),
        PINLATER_CONTROL_URL=str(settings.control_url),
        PINLATER_BUS_PREFIX=bus_prefix,
        PINLATER_CELERY_IMPORTS=TASKS_MODULE,
        PINLATER_POLL_INTERVAL_S="0.5",
        PYTHONPATH=str(REPO),
    )
    env.pop("PINLATER_SERVERS", None)
    return env


def make_test_app(env: dict[str, str]) -> Celery:
    """An app in the test process, publishing to the same setup."""
    import tests.workers.celery_tasks  # noqa: F401  (binds the shared tasks)

    options = {
        "pinlater_env": {k: v for k, v in env.items() if k.startswith("PINLATER_")},
        "bus_prefix": env["PINLATER_BUS_PREFIX"],
    }
    app = make_app(f"test_{uuid.uuid4().hex[:6]}", transport_options=options, imports=())
    app.finalize(auto=True)
    return app


def worker_args(name: str, queues: list[str], concurrency: int = 2, *extra: str) -> list[str]:
    """``celery`` arguments of a test's worker consuming ``queues``."""
    return ["worker", "-n", f"{name}@%h", "-Q", ",".join(queues), "-c", str(concurrency),
            "--without-gossip", "--without-mingle", "-l", "info", *extra]


def procfile_line(name: str) -> str:
    """The command of the Procfile's process ``name``."""
    for line in (REPO / "Procfile").read_text().splitlines():
        process, sep, command = line.partition(":")
        if sep and process.strip() == name:
            return command.strip()
    raise AssertionError(f"no {name} in the Procfile")


class Processes:
    """Long-running child processes of one test."""

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = env
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, list[str]] = {}

    def start(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = self._spawn(name, [sys.executable, "-m", "celery", "-A", "workers.app", *args],
                           dict(self.env, **(extra_env or {})), REPO)
        self.commands[name] = args
        return proc

    def start_shell(self, name: str, command: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        """``command`` as a Procfile runner starts it: a shell line."""
        return self._spawn(name, ["/bin/sh", "-c", command], env, cwd)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def worker(self, name: str, queues: list[str], concurrency: int = 2, *extra: str) -> subprocess.Popen[bytes]:
        return self.start(name, worker_args(name, queues, concurrency, *extra))

    def restart(self, name: str) -> subprocess.Popen[bytes]:
        self.kill_group(name)
        return self.start(name, self.commands[name])

    def kill_group(self, name: str) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        for name in list(self.procs):
            self.kill_group(name)

    def log(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def wait_for_workers(app: Celery, names: list[str], timeout: float = 30.0) -> None:
    hosts = {f"{n}@{socket.gethostname()}" for n in names}

    def ready() -> bool:
        replies = app.control.inspect(timeout=0.5, destination=sorted(hosts)).ping() or {}
        return hosts <= set(replies)

    wait_until(ready, timeout, interval=0.2, what=f"workers {sorted(hosts)}")


@contextlib.contextmanager
def processes(env: dict[str, str], logdir: Path) -> Iterator[Processes]:
    procs = Processes(env, logdir)
    try:
        yield procs
    finally:
        procs.close()
