"""``pinlater server --processes N``: N server processes on one port.

A Python process serves calls on one core at a time (the GIL), so one
server process caps throughput well below the shards'. The parent binds
the port and starts N children (``pinlater.thrift.child``) that accept on
that one listening socket, each with its own JobService and connections.

Why one shared socket rather than ``SO_REUSEPORT`` (a socket per child,
balanced by the kernel):

* Clients keep their connections (ThriftClient pools them), so balance is
  decided once per connection. ``SO_REUSEPORT`` picks a child by a hash of
  the addresses, blind to load: 4 connections over 4 children land on 4
  different ones only 9% of the time. On the shared socket a child accepts
  only while no other live child holds fewer connections
  (``StatsTable.may_accept``), so connections spread evenly.
* A child that dies under ``SO_REUSEPORT`` takes the connections waiting in
  its own accept queue with it (reset); on a shared queue they wait for the
  next child.
* The parent holds the port for the server's whole life: a replacement
  child inherits it, nothing binds again, no other process can take it.

Children are started with exec, not a bare fork: the parent runs threads
(the metrics endpoint, the monitor) and a fork of a threaded process can
deadlock; exec starts clean, and nothing crosses but the two descriptors
passed on purpose (the socket, the stats table).

The parent serves ``/metrics`` and ``/stats.json`` summed over all children
(``pinlater.thrift.stats``; the store calls' metrics through
``pinlater.thrift.shared_metrics``), runs the monitor unless told not to, restarts
a child that dies (logging why), and gives up (stops everything, exit 1)
when more than ``crash_limit`` children exit unexpectedly within
``crash_window_s``. SIGTERM or SIGINT: every child stops accepting and
finishes its calls in flight (``grace_s``), then the parent exits; a child
still running ``KILL_AFTER_S`` past the grace is killed.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pinlater.kit.signals import on_signals
from pinlater.observe import tracing
from pinlater.observe.metrics import Family
from pinlater.observe.seam import job_store_families, merge_snapshots
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.thrift import shared_metrics
from pinlater.thrift.child import WorkerOptions, command
from pinlater.thrift.stats import PINLATER, MetricsServer, StatsLayout, StatsTable

log = logging.getLogger(__name__)

KILL_AFTER_S = 5.0
# A child that exits sooner than this after it started is restarted only
# after RESTART_DELAY_S, so that a crash loop does not spin.
QUICK_EXIT_S = 5.0
RESTART_DELAY_S = 1.0
WATCH_INTERVAL_S = 0.2


@dataclass(frozen=True)
class Program:
    """What a supervisor runs N of: a server whose children are
    ``python -m <module>`` (built on ``pinlater.thrift.child``)."""

    label: str  # the log's name for the whole server ("pinlater server")
    trace_name: str  # the service name of the parent's traces and metrics
    module: str
    options: str  # JSON every child is given, as its module reads it
    grace_s: float  # what a child gets to finish its calls after SIGTERM
    layout: StatsLayout
    # The children's store-call snapshots (``pinlater.thrift.shared_metrics``),
    # as the parent's /metrics shows them.
    store_families: Callable[[list[Any]], list[Family]]


def job_server(options: WorkerOptions) -> Program:
    """``pinlater server --processes N``."""
    return Program("pinlater server", "pinlater-server", "pinlater.thrift.child", options.to_json(), options.grace_s,
                   PINLATER, lambda snapshots: job_store_families(merge_snapshots(snapshots)))


class SupervisorError(RuntimeError):
    """The children could not be started."""


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    started: float


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Supervisor:
    def __init__(
        self,
        host: str,
        port: int,
        processes: int,
        program: Program,
        *,
        metrics_port: int | None,
        crash_limit: int = 5,
        crash_window_s: float = 60.0,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.processes = processes
        self.program = program
        self.crash_limit = crash_limit
        self.crash_window_s = crash_window_s
        self.ready_timeout_s = ready_timeout_s
        self._listener = socket.create_server((host, port), backlog=1024)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self.table, self._table_fd = StatsTable.shared(processes, program.layout)
        # The children's store metrics (pinlater.thrift.shared_metrics); mode 0700.
        self._metrics_dir = tempfile.mkdtemp(prefix=f"{program.trace_name}-metrics-")
        self.metrics = (
            MetricsServer(self.table, host, metrics_port,
                          lambda: program.store_families(shared_metrics.read(self._metrics_dir)))
            if metrics_port is not None else None
        )
        # The children send their store calls' and call times' own instruments.
        tracing.configure(program.trace_name)
        tracing.observe_metrics(self.table.families)
        self._children: list[_Child | None] = [None] * processes
        self._restart_at: dict[int, float] = {}
        self._exits: collections.deque[float] = collections.deque()
        self._stopping = threading.Event()
        self._reload = threading.Event()
        self.gave_up = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Supervisor:
        """Starts every child and returns once all of them accept; raises
        SupervisorError (after stopping the others) if one exits first."""
        for slot in range(self.processes):
            self._spawn(slot)
        deadline = time.monotonic() + self.ready_timeout_s
        while not all(self.table.ready(slot) for slot in range(self.processes)):
            for slot, child in enumerate(self._children):
                code = child.proc.poll() if child else None
                if code is not None:
                    self.stop()
                    raise SupervisorError(f"server process {slot} exited with {describe_exit(code)} "
                                          "before it was ready (its error is above)")
            if time.monotonic() > deadline:
                self.stop()
                raise SupervisorError(f"the server processes were not ready within {self.ready_timeout_s:g}s")
            time.sleep(0.02)
        if self.metrics is not None:
            self.metrics.start()
        log.info("%s on %s:%d: %d processes (pids %s)", self.program.label, self.host, self.port, self.processes,
                 " ".join(str(self.table.pid(slot)) for slot in range(self.processes)))
        return self

    def request_stop(self) -> None:
        """Sets a flag; a signal handler must not call it (``pinlater.kit.signals``)."""
        self._stopping.set()

    def request_reload(self) -> None:
        """On SIGHUP (through ``pinlater.kit.signals``): the children are told to
        reload their TLS files and roles."""
        self._reload.set()

    def serve_forever(self) -> None:
        """Watches the children until ``request_stop`` (or a crash loop),
        then stops them all."""
        while not self._stopping.wait(WATCH_INTERVAL_S):
            if self._reload.is_set():
                self._reload.clear()
                for child in self._children:
                    if child is not None and child.proc.poll() is None:
                        child.proc.send_signal(signal.SIGHUP)
            self._watch()
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        children = [(slot, child) for slot, child in enumerate(self._children) if child is not None]
        for _, child in children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.program.grace_s + KILL_AFTER_S
        for slot, child in children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("server process %d (pid %d) still running %gs after SIGTERM: killing it",
                            slot, child.proc.pid, self.program.grace_s + KILL_AFTER_S)
                child.proc.kill()
                child.proc.wait()
            self.table.process_exited(slot, restarting=False)
            self._children[slot] = None
        self._listener.close()
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        if self._table_fd >= 0:
            os.close(self._table_fd)
            self._table_fd = -1
        shutil.rmtree(self._metrics_dir, ignore_errors=True)
        log.info("%s stopped (%d processes)", self.program.label, len(children))

    # -- children -------------------------------------------------------------------------
    def _spawn(self, slot: int) -> None:
        listen_fd = self._listener.fileno()
        # stdout goes to stderr: the parent's stdout says only where it listens.
        proc = subprocess.Popen(
            command(self.program.module, listen_fd, self._table_fd, self.processes, slot, self.program.options,
                    self._metrics_dir),
            pass_fds=(listen_fd, self._table_fd), stdin=subprocess.DEVNULL, stdout=2,
        )
        self.table.process_started(slot, proc.pid)
        self._children[slot] = _Child(proc, time.monotonic())

    def _watch(self) -> None:
        now = time.monotonic()
        for slot, child in enumerate(self._children):
            if child is None:
                if now >= self._restart_at.get(slot, now):
                    self._restart_at.pop(slot, None)
                    self._spawn(slot)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            self.table.process_exited(slot, restarting=True)
            self._children[slot] = None
            lived = now - child.started
            if code != 0:
                self._exits.append(now)
            while self._exits and now - self._exits[0] > self.crash_window_s:
                self._exits.popleft()
            if len(self._exits) > self.crash_limit:
                log.error("server process %d (pid %d) exited with %s: %d unexpected exits within %gs, giving up",
                          slot, child.proc.pid, describe_exit(code), len(self._exits), self.crash_window_s)
                self.gave_up = True
                self._stopping.set()
                return
            delay = RESTART_DELAY_S if lived < QUICK_EXIT_S else 0.0
            log.log(logging.ERROR if code else logging.WARNING,
                    "server process %d (pid %d) exited with %s after %.1fs; starting another%s",
                    slot, child.proc.pid, describe_exit(code), lived, f" in {delay:g}s" if delay else "")
            self._restart_at[slot] = now + delay


def run(program: Program, host: str, port: int, processes: int, *, metrics_port: int | None, banner: str,
        beside: Callable[[int], contextlib.AbstractContextManager[object]] | None = None) -> int:
    """``processes`` children of ``program`` on ``host:port`` until SIGTERM
    or SIGINT; prints ``<banner> listening on host:port`` once they all
    accept. ``beside(port)``: what the parent runs meanwhile, once for all
    children (the job server's monitor). Exit status: 0 stopped, 1 gave up
    after a crash loop, 2 could not start."""
    try:
        supervisor = Supervisor(host, port, processes, program, metrics_port=metrics_port)
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    on_signals({signal.SIGTERM: supervisor.request_stop, signal.SIGINT: supervisor.request_stop,
                signal.SIGHUP: supervisor.request_reload})
    try:
        supervisor.start()
    except SupervisorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with beside(supervisor.port) if beside is not None else contextlib.nullcontext():
        metrics = f", metrics on http://{host}:{supervisor.metrics.port}/metrics" if supervisor.metrics else ""
        print(f"{banner} listening on {host}:{supervisor.port}{metrics} ({processes} processes)", flush=True)
        supervisor.serve_forever()
    return 1 if supervisor.gave_up else 0


def serve(settings: Settings, host: str, port: int, processes: int, options: WorkerOptions, *,
          metrics_port: int | None, monitor_interval_s: float | None) -> int:
    """``pinlater server --processes N`` (N > 1): until SIGTERM or SIGINT.
    The monitor, if any, runs here in the parent, once for all children."""

    @contextlib.contextmanager
    def monitor(interval_s: float, bound: int) -> Iterator[object]:
        service = JobService.from_settings(settings, source=f"pinlater-server-{host}-{bound}")
        watcher = Monitor(service.operators, interval_s=interval_s)
        watcher.start_thread()
        try:
            yield watcher
        finally:
            watcher.stop()
            service.close()

    return run(job_server(options), host, port, processes, metrics_port=metrics_port, banner="pinlater server",
               beside=None if monitor_interval_s is None else functools.partial(monitor, monitor_interval_s))
