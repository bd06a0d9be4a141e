"""Pausing a host: every process spawned in it stops, neither answering nor
dying, as in a long GC pause or a suspended VM.

With the cgroup v1 freezer (when /sys/fs/cgroup/freezer is writable) a
process joins its host's cgroup before it runs, so its children are frozen
too; without it, each spawned process group gets SIGSTOP and SIGCONT."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.topology.commands import TopologyError
from tests.support.topology.reap import FREEZER_ROOT, cgroup_pids

STATE_WAIT_S = 5.0


def freezer_usable() -> bool:
    return os.access(FREEZER_ROOT, os.W_OK) and (FREEZER_ROOT / "cgroup.procs").exists()


class HostFreezer:
    """Pause and resume of the processes of one host."""

    def __init__(self, name: str, use_cgroup: bool) -> None:
        self.cgroup: Path | None = FREEZER_ROOT / name if use_cgroup else None
        self.groups: list[subprocess.Popen[bytes]] = []
        self.paused = False
        if self.cgroup is not None:
            self.cgroup.mkdir(exist_ok=True)

    def join_self(self) -> None:
        """Moves the calling process into the cgroup: run between fork and
        exec (``preexec_fn``), so nothing runs before it is pausable."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def track(self, process: subprocess.Popen[bytes]) -> None:
        """Keeps ``process`` for pause and resume; with the cgroup, returns
        once it has joined (it joins itself, after fork: a pause before that
        would miss it on a busy machine)."""
        self.groups.append(process)
        if self.cgroup is None:
            return
        deadline = time.monotonic() + STATE_WAIT_S
        while process.pid not in cgroup_pids(self.cgroup) and process.poll() is None:
            if time.monotonic() > deadline:
                raise TopologyError(f"process {process.pid} did not join {self.cgroup.name} within {STATE_WAIT_S:g}s")
            time.sleep(0.005)

    def _set_state(self, state: str) -> None:
        assert self.cgroup is not None
        (self.cgroup / "freezer.state").write_text(state)
        # FREEZING until every task has stopped; bounded, as every wait here.
        deadline = time.monotonic() + STATE_WAIT_S
        while (now := (self.cgroup / "freezer.state").read_text().strip()) != state:
            if time.monotonic() > deadline:
                raise TopologyError(f"freezer {self.cgroup.name} stayed {now}, not {state}, for {STATE_WAIT_S:g}s")
            time.sleep(0.01)

    def _signal_groups(self, sig: signal.Signals) -> None:
        for process in self.groups:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    continue

    def _wait_stopped(self) -> None:
        """Until every thread of every process in the groups has stopped: a
        SIGSTOP is only queued when kill() returns, and a thread woken by
        data in that moment could still answer."""
        groups = {process.pid for process in self.groups if process.poll() is None}
        deadline = time.monotonic() + STATE_WAIT_S
        while running := [pid for pid in _members(groups) if not _stopped(pid)]:
            if time.monotonic() > deadline:
                raise TopologyError(f"processes {running} did not stop within {STATE_WAIT_S:g}s of SIGSTOP")
            time.sleep(0.005)

    def pause(self) -> None:
        if self.cgroup is not None:
            self._set_state("FROZEN")
        else:
            self._signal_groups(signal.SIGSTOP)
            self._wait_stopped()
        self.paused = True

    def resume(self) -> None:
        if self.cgroup is not None:
            self._set_state("THAWED")
        else:
            self._signal_groups(signal.SIGCONT)
        self.paused = False


def _stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name (state first)."""
    return path.read_text().rpartition(")")[2].split()


def _members(groups: set[int]) -> list[int]:
    """The processes whose process group is one of ``groups``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat_fields(Path("/proc", entry, "stat"))[2]) in groups:
                    found.append(int(entry))
            except (OSError, IndexError):
                continue
    return found


def _stopped(pid: int) -> bool:
    """Every thread stopped (T), or the process gone or a zombie."""
    try:
        states = [_stat_fields(stat)[0] for stat in Path(f"/proc/{pid}/task").glob("*/stat")]
    except OSError:
        return True
    return all(state in "TtZX" for state in states)
