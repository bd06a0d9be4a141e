"""Helpers shared by the HBase benchmarks (bench/feeds.py, bench/typeahead.py):
an open-loop request driver, percentiles, rounds that rotate which
measurement goes first, the region servers' GC pauses, the CPU the
machine and its servers spent, and flushes and major compactions through one
long-lived admin JVM (the tests use it too)."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
REPO = Path(__file__).resolve().parent.parent


@dataclass(slots=True)
class OpenLoop(Generic[T, R]):
    """What an open-loop phase saw: per answered request its item, its
    latency from the scheduled time (seconds) and what ``call`` returned."""

    requests: int
    answered: list[tuple[T, float, R]] = field(default_factory=list)
    errors: int = 0
    late_start_s: float = 0.0  # the most a request was submitted after its due time


def open_loop(call: Callable[[T], R], items: Sequence[T], rate: float, threads: int = 64) -> OpenLoop[T, R]:
    """Request ``i`` (``call(items[i])``) is due at start + i/rate, whatever
    the earlier ones are doing; its latency counts from then, so queueing
    behind slow requests (or for a free thread) is not hidden."""
    out: OpenLoop[T, R] = OpenLoop(len(items))
    lock = threading.Lock()

    def one(due: float, item: T) -> None:
        try:
            result = call(item)
        except Exception:  # noqa: BLE001 (counted, and the run goes on)
            with lock:
                out.errors += 1
            return
        latency = time.perf_counter() - due
        with lock:
            out.answered.append((item, latency, result))

    start = time.perf_counter() + 0.1
    with ThreadPoolExecutor(max_workers=threads) as executor:
        for i, item in enumerate(items):
            due = start + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            out.late_start_s = max(out.late_start_s, time.perf_counter() - due)
            executor.submit(one, due, item)
    return out


def percentile_ms(values_s: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0..1, nearest rank) of seconds, in ms; NaN when empty."""
    ordered = sorted(values_s)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


def rotating(rounds: int, *measures: Callable[[], float]) -> list[list[float]]:
    """``rounds`` runs of every measurement, each round starting one later in
    the list than the last, so no one of them always runs first or last
    (HBase flushes its memstores as data piles up, and whichever runs later
    in a round pays for what ran before it)."""
    out: list[list[float]] = [[] for _ in measures]
    for round_ in range(rounds):
        for i in range(len(measures)):
            k = (round_ + i) % len(measures)
            out[k].append(measures[k]())
    return out


@contextlib.contextmanager
def own_collections() -> Iterator[dict[str, float]]:
    """This process's cyclic-collector runs while the block runs, filled in
    when it ends: how many, how many were full ones (generation 2), the
    longest and the total in ms of wall time (every thread of the process
    waits for a collection, and so does a request measured from its
    scheduled time)."""
    spans: list[tuple[int, float]] = []
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spans.append((info["generation"], time.perf_counter() - began[0]))

    out: dict[str, float] = {}
    gc.callbacks.append(timed)
    try:
        yield out
    finally:
        gc.callbacks.remove(timed)
        out.update({"count": len(spans), "full": sum(g == 2 for g, _ in spans),
                    "max_ms": round(max((s for _, s in spans), default=0.0) * 1000, 1),
                    "total_ms": round(sum(s for _, s in spans) * 1000, 1)})


_PROCFILE = Path(__file__).resolve().parent.parent / "Procfile"


def procfile_niceness(process: str) -> int:
    """The ``nice -n N`` the Procfile starts ``process`` under (0 without
    one): a bench that stands in for that process runs as it would."""
    for line in _PROCFILE.read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == process:
            found = re.match(r"\s*nice\s+-n\s*(\d+)\s", command)
            return int(found.group(1)) if found else 0
    raise ValueError(f"the Procfile has no process {process!r}")


_GC_PAUSE = re.compile(r"^\[(\d{4}-\d\d-\d\dT[\d:.]+[+-]\d{4})\]\[[\d.]+s\] GC\(\d+\) Pause .* ([\d.]+)ms$")


def gc_pauses(cluster: str, since: float, until: float) -> dict[str, float]:
    """The GC pauses ``scripts/hbase``'s region server of ``cluster`` logged
    between two ``time.time()`` values: count, longest and total, in ms."""
    var = Path(os.environ.get("PINLATER_VAR", REPO / ".var"))
    pauses: list[float] = []
    for log in sorted((var / "hbase" / cluster / "logs").glob("gc.log*")):
        for line in log.read_text(errors="replace").splitlines():
            match = _GC_PAUSE.match(line)
            if match:
                at = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
                if since <= at <= until:
                    pauses.append(float(match.group(2)))
    return {"count": len(pauses), "max_ms": max(pauses, default=0.0), "total_ms": round(sum(pauses), 1)}


def warn_of_quick_jit() -> None:
    """One line on stderr when the clusters run with C1 alone (``make test``
    starts them so): their figures would not be those of a cluster as it
    would run."""
    for cluster in ("primary", "standby"):
        jit = Path(os.environ.get("PINLATER_VAR", REPO / ".var")) / "hbase" / cluster / "jit"
        if jit.exists() and jit.read_text().strip() == "quick":
            print(f"warning: the {cluster} HBase cluster runs with C1 alone (PINLATER_HBASE_JIT=quick); "
                  "for figures as published: PINLATER_HBASE_JIT=full scripts/services up", file=sys.stderr)


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
# Server processes by a word of their command line (HBase standalone runs its
# region server inside the master's JVM; in the distributed layout the
# master's own small share counts with the region servers).
SERVER_KINDS = (("thrift2.ThriftServer", "hbase_thrift2"), ("thrift.ThriftServer", "hbase_thrift1"),
                ("HRegionServer", "hbase_region_server"), ("HMaster", "hbase_region_server"),
                ("mariadbd", "mariadb"), ("redis-server", "redis"))


def cpu_snapshot() -> dict[str, float]:
    """CPU seconds so far: ``machine`` (every core, busy time, from
    /proc/stat: processes that exited count too; the hypervisor's ``steal``
    apart) and each kind of server
    process (``SERVER_KINDS``). Two snapshots' difference is what a phase
    cost; with nothing else running, the machine's less the servers' is
    what the benchmark's own processes (workers, clients) spent."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    # Steal is time the hypervisor ran something else on our cores: no
    # process here spent it, so it is kept apart from the machine's.
    out = {"machine": (user + nice + system + irq + softirq) * _TICK_S, "steal": steal * _TICK_S}
    for kind in dict(SERVER_KINDS).values():
        out[kind] = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{pid}/stat") as f:
                times = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        for word, kind in SERVER_KINDS:
            if word.encode() in command:
                out[kind] += (int(times[11]) + int(times[12])) * _TICK_S
                break
    return out


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What happened between two ``cpu_snapshot``s, and ``clients``: the
    machine's CPU less the servers'."""
    spent = {kind: round(after[kind] - before[kind], 2) for kind in before}
    spent["clients"] = round(spent["machine"] - sum(v for k, v in spent.items() if k not in ("machine", "steal")),
                             2)
    return spent


def idle_cpu(seconds: float) -> dict[str, float]:
    """What the machine and each kind of server spend over ``seconds`` with
    no load (HBase's chores, the JIT, flushes): the baseline a light phase's
    CPU is measured against (bench/capacity.py subtracts it)."""
    before = cpu_snapshot()
    time.sleep(seconds)
    return cpu_spent(before, cpu_snapshot())


class CpuCost:
    """The CPU each named measurement's runs cost (``cpu_spent`` of each):
    wrap a measurement with ``costed`` before handing it to ``rotating``."""

    def __init__(self) -> None:
        self.runs: dict[str, list[dict[str, float]]] = {}

    def costed(self, name: str, measure: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            before = cpu_snapshot()
            seconds = measure()
            self.runs.setdefault(name, []).append(cpu_spent(before, cpu_snapshot()))
            return seconds

        return run

    def mean(self, per: float = 1.0) -> dict[str, dict[str, float]]:
        """Each name's mean CPU seconds a run, by kind, divided by ``per``."""
        return {name: {kind: round(sum(r[kind] for r in runs) / len(runs) / per, 4) for kind in runs[0]}
                for name, runs in self.runs.items()}


class HBaseAdmin:
    """Flushes and major compactions of one cluster through one long-lived
    ``scripts/hbase admin`` JVM: a compaction then costs HBase's work, not a
    JVM's start and its connection (about 3 s of CPU each on this machine).
    Fails loudly with HBase's one-line error; after a failure the JVM is
    stopped and the next call starts another. Safe to share between threads."""

    def __init__(self, cluster: str, timeout_s: float = 150.0) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def flush(self, table: str) -> None:
        self._call(f"flush {table}")

    def major_compact(self, table: str) -> None:
        """Flush, then major-compact and wait until it is over."""
        self._call(f"major {table}")

    def _call(self, command: str) -> None:
        with self._lock:
            if self._proc is None:
                self._proc = subprocess.Popen([str(REPO / "scripts" / "hbase"), "admin", self.cluster],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            assert self._proc.stdin is not None and self._proc.stdout is not None
            try:
                self._proc.stdin.write(command + "\n")
                self._proc.stdin.flush()
                ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout_s)
                answer = self._proc.stdout.readline().strip() if ready else "no answer within the timeout"
            except OSError as e:
                answer = f"the admin JVM is gone ({e})"
            if answer != "ok":
                self._stop()
                raise RuntimeError(f"hbase {self.cluster}: {command}: {answer or 'the admin JVM exited'}")

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):  # the JVM already exited: its pipe is broken
                proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> HBaseAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
