"""One ``pinlater server`` subprocess for the tests that need the real
process: flags, environment, signals, ``--processes``, hostile clients, and
the workers' remote job service.

It listens on an ephemeral port of 127.0.0.1 and prints its address once
listening; its stderr goes to a file, never a pipe nobody reads (the
children of ``--processes`` write there too, and a full pipe would block
them)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO
from urllib.request import urlopen

from pinlater.kit.tls import ClientTls
from pinlater.thrift.client import ThriftClient
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, REPO, redis_url

# "pinlater server listening on 127.0.0.1:PORT[, metrics on http://127.0.0.1:PORT/metrics][ (N processes)]"
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)(?:, metrics on http://127\.0\.0\.1:(\d+)/metrics)?")


def cli(*args: str) -> list[str]:
    """The ``pinlater`` command line of this interpreter."""
    return [sys.executable, "-m", "pinlater.cli", *args]


def server_env(**overrides: str) -> dict[str, str]:
    """This process's environment for a server over the tests' first Redis
    shard, plus ``overrides``."""
    env = dict(os.environ)
    env.update({
        "PINLATER_SHARDS": f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}",
        "PINLATER_CONTROL_URL": redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        "PINLATER_ADMIN_SECRET": "secret",
        "PINLATER_SERVER_HOST": "127.0.0.1",
        "PINLATER_SERVER_PORT": "0",
    })
    env.pop("PINLATER_SERVERS", None)
    env.update(overrides)
    return env


class ServerProcess:
    """``pinlater server --host 127.0.0.1 --port 0 ARGS`` with ``env``.

    ``metrics=False`` starts it without its metrics endpoint. The process
    leads its own process group, so ``close`` reaches the children of
    ``--processes`` too. Use it as a context manager, or call ``close``."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, log_path: Path | None = None,
                 metrics: bool = True) -> None:
        self._own_log = log_path is None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="pinlater-server-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = log_path
        self._log: TextIO = log_path.open("w")
        self.p = subprocess.Popen(
            cli("server", "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0" if metrics else "-1", *args),
            env=server_env() if env is None else env, cwd=REPO, stdout=subprocess.PIPE, stderr=self._log,
            text=True, start_new_session=True,
        )
        assert self.p.stdout is not None
        line = self.p.stdout.readline()  # printed once listening; EOF if it died
        match = LISTENING.search(line)
        if match is None:
            self.close()
            raise AssertionError(f"pinlater server did not start: first line {line!r}; its log: {self.log()}")
        self.port = int(match.group(1))
        self.metrics_port = int(match.group(2)) if match.group(2) else None
        self.address = f"127.0.0.1:{self.port}"

    def log(self) -> str:
        """What it wrote to stderr so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stats(self) -> dict[str, Any]:
        assert self.metrics_port is not None, "started without metrics"
        with urlopen(f"http://127.0.0.1:{self.metrics_port}/stats.json", timeout=5) as response:
            out: dict[str, Any] = json.loads(response.read())
        return out

    def child_pids(self) -> list[int]:
        return [int(p["pid"]) for p in self.stats()["processes"]]

    def client(self, source: str, timeout_s: float = 10, tls: ClientTls | None = None, **kwargs: Any) -> ThriftClient:
        return ThriftClient([self.address], source=source, timeout_s=timeout_s, tls=tls, **kwargs)

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def terminate(self, timeout_s: float = 20) -> tuple[int, str]:
        """SIGTERM, wait for the exit: its code and its log."""
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout_s)
        return self.p.returncode, self.log()

    def close(self, grace_s: float = 10) -> None:
        """SIGTERM, then SIGKILL to the whole group if it lingers."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.p.wait(grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)  # children of --processes, too
        self.p.wait(10)
        if self.p.stdout is not None:
            self.p.stdout.close()
        self._log.close()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL at once (a server stuck inside a call)."""
        if self.p.poll() is None:
            self.p.kill()
        self.close(grace_s=0)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
