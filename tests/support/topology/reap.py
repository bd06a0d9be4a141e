"""Names that say who owns them, and the reaper of what dead owners left.

Every namespace and freezer cgroup of a topology is named
``pltopo-PID-START-SEQ-HOST``: PID and START (its start time in clock ticks,
so that a reused pid is not mistaken for the owner) identify the process that
built it. ``reap_orphans`` removes everything whose owner is gone; a
topology calls it before building, and its janitor process (janitor.py)
calls ``reap_run`` for its owner the moment the owner dies, even by
SIGKILL."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

from tests.support.topology.commands import run
from tests.support.topology.netns import NETNS_DIR

PREFIX = "pltopo"
FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")
CPU_ROOT = Path("/sys/fs/cgroup/cpu")  # a host's CPU quota (Topology's ``cpu``)
NAME = re.compile(rf"^({PREFIX}-(\d+)-(\d+)-\d+)-[a-z][a-z0-9]*$")
KILL_WAIT_S = 5.0


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (field 22 of its stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def run_name(seq: int) -> str:
    pid = os.getpid()
    return f"{PREFIX}-{pid}-{start_ticks(pid)}-{seq}"


def owner_alive(run_prefix: str) -> bool:
    _, pid, start, _ = run_prefix.split("-")
    return start_ticks(int(pid)) == int(start)


def our_namespaces() -> list[str]:
    try:
        return sorted(name for name in os.listdir(NETNS_DIR) if NAME.match(name))
    except FileNotFoundError:
        return []


def our_cgroups() -> list[Path]:
    found = []
    for root in (FREEZER_ROOT, CPU_ROOT):
        try:
            found += [path for path in root.iterdir() if NAME.match(path.name) and path.is_dir()]
        except OSError:
            continue
    return sorted(found)


def pids_in(namespaces: list[str]) -> set[int]:
    """Processes whose network namespace is one of ``namespaces`` (what ``ip
    netns pids`` finds, for all of them in one walk of /proc)."""
    inodes = set()
    for name in namespaces:
        try:
            inodes.add(f"net:[{os.stat(NETNS_DIR / name).st_ino}]")
        except OSError:
            continue
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") in inodes:
                    found.add(int(entry))
            except OSError:
                continue
    return found


def cgroup_pids(cgroup: Path) -> set[int]:
    try:
        return {int(line) for line in (cgroup / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no namespace or cgroup)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def kill_all(pids: set[int], timeout_s: float = KILL_WAIT_S) -> set[int]:
    """SIGKILLs ``pids``; those still running after ``timeout_s``."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):  # CONT: a SIGSTOPped process dies at once
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
    deadline = time.monotonic() + timeout_s
    left = {pid for pid in pids if _running(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = {pid for pid in left if _running(pid)}
    return left


def thaw(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        (cgroup / "freezer.state").write_text("THAWED")


def reap_run(run_prefix: str) -> list[str]:
    """Kills every process in the run's namespaces and cgroups, then deletes
    those (a veth goes with its namespace); what could not be removed."""
    namespaces = [name for name in our_namespaces() if name.startswith(run_prefix + "-")]
    cgroups = [path for path in our_cgroups() if path.name.startswith(run_prefix + "-")]
    for cgroup in cgroups:  # a frozen task takes its SIGKILL only once thawed
        thaw(cgroup)
    pids = pids_in(namespaces).union(*(cgroup_pids(cgroup) for cgroup in cgroups))
    pids.discard(os.getpid())
    stuck = [f"pid {pid}" for pid in sorted(kill_all(pids))]
    if namespaces:
        run(["ip", "-force", "-batch", "-"], stdin="".join(f"netns del {name}\n" for name in namespaces), check=False)
    stuck += [f"netns {name}" for name in our_namespaces() if name in namespaces]
    for cgroup in cgroups:
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            try:
                cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # busy until its last task is gone
                if time.monotonic() > deadline:
                    stuck.append(f"cgroup {cgroup}")
                    break
                # A process that joined after the pids were read (its owner
                # died between spawning it and its joining) goes the same way.
                thaw(cgroup)
                kill_all(cgroup_pids(cgroup) - {os.getpid()}, timeout_s=0.2)
                time.sleep(0.02)
    return stuck


def runs_present() -> set[str]:
    names = [*our_namespaces(), *(path.name for path in our_cgroups())]
    return {match.group(1) for name in names if (match := NAME.match(name))}


def reap_orphans() -> list[str]:
    """Reaps every run whose owner is dead; the runs reaped."""
    dead = sorted(prefix for prefix in runs_present() if not owner_alive(prefix))
    for prefix in dead:
        reap_run(prefix)
    return dead
