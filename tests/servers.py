"""Addresses of the test servers that ``scripts/services up`` starts, and the
fixture logic that makes sure they run (tests never skip for a missing
server: they start it, or fail loudly)."""

from __future__ import annotations

import atexit
import fcntl
import os
import random
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from bench.support import HBaseAdmin

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

# Each test process has its own block of 16 Redis dbs (scripts/services
# gives the servers 128): under pytest-xdist, worker gwN uses block N + 1, so
# tests that flush a db never meet another process's tests, nor the demo and
# the benchmarks, which keep block 0. A plain pytest run uses block 0.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
REDIS_DB_BLOCK = int(_XDIST_WORKER.removeprefix("gw")) + 1 if _XDIST_WORKER.startswith("gw") else 0
if REDIS_DB_BLOCK > 7:
    raise RuntimeError(f"{_XDIST_WORKER}: the test Redis servers have dbs for 7 test processes at most")


def redis_db(number: int) -> int:
    """Test db ``number`` (0-15) in this process's block."""
    if not 0 <= number < 16:
        raise ValueError(f"a test Redis db is 0-15, not {number}")
    return REDIS_DB_BLOCK * 16 + number


# Tests use their own Redis db numbers and database names, apart from the demo's.
REDIS_SHARD_DB = redis_db(1)
REDIS_CONTROL_DB = redis_db(2)
# A suffix for names that must differ between test processes (MySQL databases).
WORKER_SUFFIX = f"_{_XDIST_WORKER}" if _XDIST_WORKER else ""


def redis_url(port: int, db: int) -> str:
    return f"redis://127.0.0.1:{port}/{db}"


def mysql_url(database: str) -> str:
    return f"{MYSQL}/{database}"


# The TLS stores of scripts/services (same ports, users and passwords): a Redis
# speaking TLS only, its default user off, and a MariaDB requiring TLS, with
# certificates of a CA made once into PINLATER_VAR/tls-stores.
VAR = Path(os.environ.get("PINLATER_VAR") or REPO / ".var")
TLS_STORES = VAR / "tls-stores"
STORE_CA = TLS_STORES / "ca.pem"
STORE_CLIENT_CERT = TLS_STORES / "client.pem"
STORE_CLIENT_KEY = TLS_STORES / "client.key"
REDIS_TLS_PORT = 16390
REDIS_TLS_USER = "pinlater_tls"
REDIS_TLS_PASSWORD = "tls-redis-pw-5c1e"
MYSQL_TLS_PORT = 13307
MYSQL_TLS_USER = "pinlater_tls"
MYSQL_TLS_PASSWORD = "tls-mysql-pw-9b2d"


def redis_tls_url(db: int, *, password: str = REDIS_TLS_PASSWORD, ca: Path = STORE_CA,
                  client_cert: bool = False) -> str:
    """The TLS Redis as the ACL user, checked against ``ca``; with
    ``client_cert``, presenting the client certificate too."""
    url = f"rediss://{REDIS_TLS_USER}:{password}@127.0.0.1:{REDIS_TLS_PORT}/{db}?ssl_ca_certs={ca}"
    return url + (f"&ssl_certfile={STORE_CLIENT_CERT}&ssl_keyfile={STORE_CLIENT_KEY}" if client_cert else "")


def mysql_tls_url(database: str, *, password: str = MYSQL_TLS_PASSWORD, ca: Path = STORE_CA,
                  client_cert: bool = False) -> str:
    """The TLS MariaDB, checked against ``ca``; with ``client_cert``,
    presenting the client certificate too."""
    url = f"mysql://{MYSQL_TLS_USER}:{password}@127.0.0.1:{MYSQL_TLS_PORT}/{database}?ssl_ca={ca}"
    return url + (f"&ssl_cert={STORE_CLIENT_CERT}&ssl_key={STORE_CLIENT_KEY}" if client_cert else "")


# What this test process has started: "core" (Redis, MariaDB) or "all"
# (those, HBase and Chromium). Worker subprocesses inherit it.
_STARTED = "PINLATER_TEST_SERVICES_STARTED"


def ensure_services(*, hbase: bool = True) -> None:
    """Start the test servers with the project's script (idempotent): Redis
    and MariaDB, and unless ``hbase`` is false, HBase and Chromium too. The
    job service's own tests ask for the core only, so they run without a JVM."""
    started = os.environ.get(_STARTED, "")
    if started == "all" or (started == "core" and not hbase):
        return
    command = "up" if hbase else "up-core"
    result = subprocess.run([str(SERVICES), command], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/services {command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    os.environ[_STARTED] = "all" if hbase else "core"


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
    one more store file). Through one admin JVM per cluster and test process;
    fails loudly with HBase's error."""
    admin = _ADMINS.get(cluster)
    if admin is None:
        admin = _ADMINS.setdefault(cluster, HBaseAdmin(cluster))
    (admin.flush if flush_only else admin.major_compact)(table)


_ADMINS: dict[str, HBaseAdmin] = {}


@atexit.register
def _close_admins() -> None:
    for admin in _ADMINS.values():
        admin.close()


def hbase_raw(cluster: str, table: str, row: bytes) -> list[tuple[str, bytes, int]]:
    """Every cell of one row as stored, delete markers included: (type,
    family:qualifier, timestamp), type as HBase names it ("Put", "Delete",
    "DeleteColumn", ...)."""
    out = []
    for line in filter(None, _hbase_script("raw", cluster, table, row.decode()).splitlines()):
        kind, column, ts = line.split(" ")
        out.append((kind, column.encode(), int(ts)))
    return out


# A pool thread whose stack holds one of these waits for work: not worth showing.
_IDLE_FRAMES = ("getTask", "Scheduler.poll", "getCallRunner")
# Warnings every start logs: they would crowd out the ones that tell something.
_ROUTINE_WARNINGS = ("Cannot locate configuration", "Unable to load native-hadoop", "is deprecated")
# The threads that run a cluster's admin work: region opens and closes,
# procedures, and the Thrift servers' calls.
_WORK_THREADS = ("RS_OPEN_", "RS_CLOSE_", "PEWorker", "thrift-worker", "RpcServer.")


def hbase_report(cluster: str, mention: str = "") -> str:
    """What a local cluster's logs and threads say, for the message of a
    failure that may be the cluster's: its latest warnings and errors, the
    lines naming ``mention`` (a table, say), and the busy admin threads of
    its master and Thrift2 JVMs (the whole thread dumps are saved beside the
    logs)."""
    base = VAR / "hbase" / cluster
    lines = []
    for name in ("master.log", "thrift2.log"):
        path = base / "logs" / name
        if not path.exists():
            lines.append(f"{name}: missing")
            continue
        tail = path.read_text(errors="replace").splitlines()[-20000:]
        notable = [line for line in tail if (" WARN " in line or " ERROR " in line)
                   and not any(routine in line for routine in _ROUTINE_WARNINGS)]
        named = [line for line in tail if mention and mention in line]
        lines += [f"{name}: {line[:400]}" for line in notable[-8:] + named[-6:]]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for jvm in ("master", "thrift2"):
        pid = (base / f"{jvm}.pid").read_text().strip() if (base / f"{jvm}.pid").exists() else ""
        try:
            dump = subprocess.run(["jstack", pid], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            lines.append(f"{jvm} (pid {pid or '?'}): no thread dump: {exc}")
            continue
        saved = base / "logs" / f"threads-{jvm}-{stamp}.txt"
        saved.write_text(dump)
        busy = []
        for block in dump.split("\n\n"):
            head, _, rest = block.strip().partition("\n")
            if not head.startswith('"') or not any(w in head for w in _WORK_THREADS):
                continue
            if any(idle in rest for idle in _IDLE_FRAMES):
                continue
            frames = [f.strip()[3:] for f in rest.splitlines() if f.strip().startswith("at org.apache.hadoop")]
            if not frames:  # ended, or outside HBase's code
                continue
            state = rest.splitlines()[0].strip() if rest else ""
            busy.append(f"{head.split(chr(34))[1]} {state.removeprefix('java.lang.Thread.State: ')} at "
                        + " < ".join(frames[:4]))
        lines.append(f"{jvm} (pid {pid}): {len(busy)} busy admin threads; dump in {saved}")
        lines += [f"  {b[:400]}" for b in busy[:12]]
    return f"hbase {cluster}:\n" + "\n".join(lines)


def _hbase_script(*args: str) -> str:
    script = REPO / "scripts" / "hbase"
    result = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/hbase {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return result.stdout


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Ports for servers a test stops and starts again: below the kernel's
# ephemeral range, so while such a server is stopped no bind(0) and no
# outgoing connection of another process can take its port (a client would
# then find some other server where its shard was).
_RESTARTABLE_LOW = 20000
_held_ports: dict[int, int] = {}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def restartable_port() -> int:
    """A loopback port free now and outside the ephemeral range, held for
    this process's life (a lock file under the temp dir) so no other test
    process picks it too."""
    high = _ephemeral_low()
    if high - _RESTARTABLE_LOW < 1000:
        raise RuntimeError(f"ip_local_port_range starts at {high}: no room below it for test servers' ports")
    locks = Path(tempfile.gettempdir()) / "pinlater-test-ports"
    locks.mkdir(exist_ok=True)
    for _ in range(200):
        port = random.randrange(_RESTARTABLE_LOW, high)
        if port in _held_ports:
            continue
        fd = os.open(locks / str(port), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            os.close(fd)
            continue
        _held_ports[port] = fd  # the lock goes with the process
        return port
    raise RuntimeError(f"no free port in {_RESTARTABLE_LOW}-{high} after 200 tries")


class PrivateRedis:
    """A Redis of one test module's own, on a port of its own with its data
    under ``var``, started and stopped with ``scripts/services``: a test may
    stop it while other processes' tests keep their servers."""

    def __init__(self, var: Path) -> None:
        self.port = restartable_port()
        self.env = dict(os.environ, PINLATER_VAR=str(var))

    def _run(self, action: str) -> None:
        subprocess.run([str(SERVICES), action, str(self.port)], env=self.env, check=True,
                       capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("start-redis")

    def stop(self) -> None:
        self._run("stop-redis")
