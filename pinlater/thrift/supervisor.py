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
from dataclasses import dataclass

from pinlater.kit.signals import on_signals
from pinlater.observe import tracing
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.thrift import shared_metrics
from pinlater.thrift.child import WorkerOptions, command
from pinlater.thrift.stats import MetricsServer, StatsTable

log = logging.getLogger(__name__)

KILL_AFTER_S = 5.0
# A child that exits sooner than this after it started is restarted only
# after RESTART_DELAY_S, so that a crash loop does not spin.
QUICK_EXIT_S = 5.0
RESTART_DELAY_S = 1.0
WATCH_INTERVAL_S = 0.2


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
        options: WorkerOptions,
        *,
        metrics_port: int | None,
        crash_limit: int = 5,
        crash_window_s: float = 60.0,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.processes = processes
        self.options = options
        self.crash_limit = crash_limit
        self.crash_window_s = crash_window_s
        self.ready_timeout_s = ready_timeout_s
        self._listener = socket.create_server((host, port), backlog=1024)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self.table, self._table_fd = StatsTable.shared(processes)
        # The children's store metrics (pinlater.thrift.shared_metrics); mode 0700.
        self._metrics_dir = tempfile.mkdtemp(prefix="pinlater-server-metrics-")
        self.metrics = (
            MetricsServer(self.table, host, metrics_port, lambda: shared_metrics.read(self._metrics_dir))
            if metrics_port is not None else None
        )
        # The children send their store calls' and call times' own instruments.
        tracing.configure("pinlater-server")
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
        log.info("pinlater server on %s:%d: %d processes (pids %s)", self.host, self.port, self.processes,
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
        deadline = time.monotonic() + self.options.grace_s + KILL_AFTER_S
        for slot, child in children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("server process %d (pid %d) still running %gs after SIGTERM: killing it",
                            slot, child.proc.pid, self.options.grace_s + KILL_AFTER_S)
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
        log.info("pinlater server stopped (%d processes)", len(children))

    # -- children -------------------------------------------------------------------------
    def _spawn(self, slot: int) -> None:
        listen_fd = self._listener.fileno()
        # stdout goes to stderr: the parent's stdout says only where it listens.
        proc = subprocess.Popen(
            command(listen_fd, self._table_fd, self.processes, slot, self.options, self._metrics_dir),
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


def serve(settings: Settings, host: str, port: int, processes: int, options: WorkerOptions, *,
          metrics_port: int | None, monitor_interval_s: float | None) -> int:
    """``pinlater server --processes N`` (N > 1): until SIGTERM or SIGINT.
    The monitor, if any, runs here in the parent, once for all children."""
    try:
        supervisor = Supervisor(host, port, processes, options, metrics_port=metrics_port)
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
    service = monitor = None
    if monitor_interval_s is not None:
        service = JobService.from_settings(settings, source=f"pinlater-server-{host}-{supervisor.port}")
        monitor = Monitor(service.operators, interval_s=monitor_interval_s)
        monitor.start_thread()
    metrics = f", metrics on http://{host}:{supervisor.metrics.port}/metrics" if supervisor.metrics else ""
    print(f"pinlater server listening on {host}:{supervisor.port}{metrics} ({processes} processes)", flush=True)
    try:
        supervisor.serve_forever()
    finally:
        if monitor is not None:
            monitor.stop()
        if service is not None:
            service.close()
    return 1 if supervisor.gave_up else 0
