"""Addresses of the test servers that ``scripts/services up`` starts, and the
fixture logic that makes sure they run (tests never skip for a missing
server: they start it, or fail loudly)."""

from __future__ import annotations

import os
import select
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVICES = REPO / "scripts" / "services"

# PINLATER_TEST_REDIS_PORTS=P1,P2 points the tests at other Redis servers
# (e.g. private ones, so parallel runs on one machine do not share dbs).
REDIS_PORTS = tuple(int(p) for p in os.environ.get("PINLATER_TEST_REDIS_PORTS", "16379,16380").split(","))
MYSQL = "mysql://pinlater:pinlater@127.0.0.1:13306"
# Thrift1 and Thrift2 servers of the two HBase clusters (scripts/hbase).
HBASE_PRIMARY = "127.0.0.1:19090"
HBASE_STANDBY = "127.0.0.1:19091"
HBASE_PRIMARY_THRIFT2 = "127.0.0.1:19092"
HBASE_STANDBY_THRIFT2 = "127.0.0.1:19093"

# Tests use their own Redis db numbers and database names, apart from the demo's.
REDIS_SHARD_DB = 1
REDIS_CONTROL_DB = 2


def redis_url(port: int, db: int) -> str:
    return f"redis://127.0.0.1:{port}/{db}"


def mysql_url(database: str) -> str:
    return f"{MYSQL}/{database}"


def ensure_services() -> None:
    """Start Redis, MariaDB and HBase with the project's script (idempotent)."""
    if os.environ.get("PINLATER_TEST_SERVICES_STARTED") == "1":
        return
    result = subprocess.run([str(SERVICES), "up"], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/services up failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    os.environ["PINLATER_TEST_SERVICES_STARTED"] = "1"


def redis_cli(*args: str) -> None:
    subprocess.run([str(SERVICES), *args], check=True, capture_output=True, timeout=120)


def services(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/services ARGS``; fail loudly with its output."""
    result = subprocess.run([str(SERVICES), *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/services {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def hbase_compact(cluster: str, table: str, *, flush_only: bool = False) -> None:
    """Flush ``table`` (its name on the cluster, prefix included) on one
    HBase cluster and major-compact it: HBase then drops every delete marker
    and what it masks. ``flush_only``: the flush alone (the memstore becomes
    one more store file). Fails loudly with the script's output."""
    _hbase_script("compact", cluster, table, *(["flush"] if flush_only else []))


class HBaseAdmin:
    """Flushes and major compactions of one cluster through one long-lived
    ``scripts/hbase admin`` JVM (a compaction then costs HBase's work, not a
    JVM start). Fails loudly with HBase's one-line error."""

    def __init__(self, cluster: str, timeout_s: float = 150.0) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._proc = subprocess.Popen([str(REPO / "scripts" / "hbase"), "admin", cluster], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)

    def flush(self, table: str) -> None:
        self._call(f"flush {table}")

    def major_compact(self, table: str) -> None:
        """Flush, then major-compact and wait until it is over."""
        self._call(f"major {table}")

    def _call(self, command: str) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout_s)
        answer = self._proc.stdout.readline().strip() if ready else "no answer within the timeout"
        if answer != "ok":
            raise RuntimeError(f"hbase {self.cluster}: {command}: {answer}")

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def hbase_raw(cluster: str, table: str, row: bytes) -> list[tuple[str, bytes, int]]:
    """Every cell of one row as stored, delete markers included: (type,
    family:qualifier, timestamp), type as HBase names it ("Put", "Delete",
    "DeleteColumn", ...)."""
    out = []
    for line in filter(None, _hbase_script("raw", cluster, table, row.decode()).splitlines()):
        kind, column, ts = line.split(" ")
        out.append((kind, column.encode(), int(ts)))
    return out


def _hbase_script(*args: str) -> str:
    script = REPO / "scripts" / "hbase"
    result = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/hbase {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return result.stdout
