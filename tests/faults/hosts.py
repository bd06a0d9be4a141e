"""What the fault tests share: Redis servers and PinLater processes on hosts
of a topology, the driver that enqueues and audits from a host, and the
ledger that judges what came out."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.topology import Fault, Topology
from tests.support.waits import wait_for

REPO = Path(__file__).resolve().parents[2]
REDIS_PORT = 6379
SERVER_PORT = 9010
QUEUE = "faults"
# How long a fault lasts (the smoke run in `make test`: 6 s; `make chaos`:
# 30 s), and the steady stream before and after it.
FAULT_S = float(os.environ.get("PINLATER_FAULT_SECONDS", "6"))
BEFORE_S, AFTER_S = 3.0, 5.0


def start_redis(topo: Topology, host: str) -> subprocess.Popen[Any]:
    server = shutil.which("redis-server")
    assert server, "redis-server is missing: scripts/services up installs it"
    return topo.spawn(host, [server, "--bind", topo.address(host), "--port", str(REDIS_PORT), "--save", "",
                             "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def answers(topo: Topology, source: str, host: str, port: int, hello: bytes = b"") -> bool:
    """A TCP connection from ``source`` to ``host:port`` opens (and, with
    ``hello``, gets an answer to it)."""
    try:
        with topo.connect(source, (topo.address(host), port), timeout_s=0.5) as sock:
            if not hello:
                return True
            sock.sendall(hello)
            return bool(sock.recv(16))
    except OSError:
        return False


def wait_answering(topo: Topology, source: str, host: str, port: int, hello: bytes = b"") -> None:
    wait_for(functools.partial(answers, topo, source, host, port, hello), what=f"{host}:{port} from {source}",
             timeout_s=30)


def redis_hosts(topo: Topology, hosts: list[str], source: str) -> None:
    """A Redis server on each of ``hosts``, answering ``source``."""
    for host in hosts:
        start_redis(topo, host)
    for host in hosts:
        wait_answering(topo, source, host, REDIS_PORT, b"PING\r\n")


def store_env(topo: Topology, shards: list[str], control: str, **more: str) -> dict[str, str]:
    """The environment of a PinLater process on ``shards`` (Redis hosts)
    with its control store on ``control``; no Thrift servers unless ``more``
    names them."""
    env = os.environ | {
        "PINLATER_SHARDS": ",".join(f"{h}=redis://{topo.address(h)}:{REDIS_PORT}/0" for h in shards),
        "PINLATER_CONTROL_URL": f"redis://{topo.address(control)}:{REDIS_PORT}/0",
    }
    env.pop("PINLATER_SERVERS", None)
    return env | more


def python(topo: Topology, host: str, env: dict[str, str], *args: str, log: Path | None = None
           ) -> subprocess.Popen[Any]:
    """``python -m ARGS`` in ``host`` from the repository; its output kept
    for ``finish``, or written to ``log`` (a long-running process: a pipe
    nobody reads would fill and stop it)."""
    if log is None:
        return topo.spawn(host, [sys.executable, "-m", *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    with log.open("ab") as sink:
        return topo.spawn(host, [sys.executable, "-m", *args], env=env, cwd=REPO, stdout=sink,
                          stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen[Any], timeout_s: float) -> None:
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, out


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def shard_of(descriptor: str) -> str:
    return descriptor.split(":")[1].removeprefix("s")


@dataclass
class Window:
    """When the fault began and ended (``time.monotonic()``)."""

    cut: float
    healed: float


def through_fault(topo: Topology, env: dict[str, str], fault: Callable[[], Fault], tmp_path: Path,
                  keyed: bool = False) -> tuple[Ledger, Window]:
    """Enqueues from ``w1`` for ``BEFORE_S``, through ``fault()`` held for
    ``FAULT_S`` (it must have dropped packets), and ``AFTER_S`` beyond; then
    every job of the queue listed: the ledger of the two."""
    calls, found = tmp_path / "calls.jsonl", tmp_path / "found.jsonl"
    writer = python(topo, "w1", env, "tests.faults.driver", "enqueue", QUEUE, str(BEFORE_S + FAULT_S + AFTER_S),
                    str(calls), *(["keyed"] if keyed else []))
    time.sleep(BEFORE_S)
    with fault() as applied:
        cut = time.monotonic()
        time.sleep(FAULT_S)
        assert topo.dropped(applied) > 0  # asked, and silence answered
    healed = time.monotonic()
    finish(writer, AFTER_S + 60)
    finish(python(topo, "w1", env, "tests.faults.driver", "audit", QUEUE, str(found)), 120)
    return Ledger.read(calls, found), Window(cut, healed)


@dataclass
class Ledger:
    """The driver's calls against what the audit found."""

    calls: list[dict[str, Any]]
    found: list[dict[str, Any]]

    @classmethod
    def read(cls, calls: Path, found: Path) -> Ledger:
        return cls(read_lines(calls), read_lines(found))

    @property
    def acked(self) -> dict[str, str]:
        return {r["descriptor"]: f"job-{r['n']}" for r in self.calls if "descriptor" in r}

    def lost(self) -> list[str]:
        """Acknowledged enqueues whose job is not there with its body."""
        there = {job["descriptor"]: job["body"] for job in self.found}
        return [d for d, body in self.acked.items() if there.get(d) != body]

    def extra(self) -> list[str]:
        """Jobs there that no call attempted."""
        attempted = {f"job-{r['n']}" for r in self.calls}
        return sorted({job["body"] for job in self.found} - attempted)

    def twice(self) -> list[str]:
        bodies = [job["body"] for job in self.found]
        return sorted({b for b in bodies if bodies.count(b) > 1})

    def worst_latency_s(self) -> float:
        return max(float(r["latency_s"]) for r in self.calls)

    def between(self, start: float, end: float) -> list[dict[str, Any]]:
        return [r for r in self.calls if start <= r["t"] < end]

    def summary(self, fault: str) -> str:
        failed = [r for r in self.calls if "error" in r]
        return (f"{fault}: {len(self.calls)} enqueues, {len(self.acked)} acknowledged, {len(failed)} failed "
                f"({failed[0]['error'] if failed else 'none'}); worst latency {self.worst_latency_s():.2f} s; "
                f"lost {len(self.lost())}, extra {len(self.extra())}, twice {len(self.twice())}")
