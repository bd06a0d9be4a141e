"""One child process of ``pinlater server --processes N`` (started by
``pinlater.thrift.supervisor``, never by hand).

It inherits two file descriptors from its parent, the listening socket and
the shared stats table, and opens everything else itself: its own
JobService, so no Redis or MySQL connection is ever shared between
processes. It accepts on the shared socket when it holds the fewest
connections (``StatsTable.may_accept``), serves until SIGTERM or SIGINT
(finishing the calls in flight, like a one-process server), and stops by
itself if its parent is gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Self

from pinlater.kit.signals import on_signals
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.thrift import shared_metrics
from pinlater.thrift.server import ThriftServer
from pinlater.thrift.stats import PINLATER, ServerStats, StatsLayout, StatsTable

log = logging.getLogger(__name__)

# How often a child checks that its parent is still there.
ORPHAN_CHECK_S = 0.5


class ChildOptions:
    """Base of a dataclass of what every child of a server is told, which
    travels as one JSON argument of its command line."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # type: ignore[call-overload]  # subclasses are dataclasses

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class WorkerOptions(ChildOptions):
    """The server options every child gets (the rest come from the PINLATER_*
    settings, inherited with the environment)."""

    max_frame_bytes: int | None = None
    max_connections: int | None = None
    max_concurrent_calls: int = 64
    grace_s: float = 30.0
    log_level: int = logging.INFO


def command(
    module: str, listen_fd: int, stats_fd: int, slots: int, slot: int, options: str, metrics_dir: str
) -> list[str]:
    """The command line that runs child ``slot`` of a server whose children
    are ``python -m <module>``."""
    return [
        sys.executable, "-m", module, "--listen-fd", str(listen_fd), "--stats-fd", str(stats_fd),
        "--slots", str(slots), "--slot", str(slot), "--parent", str(os.getpid()), "--options", options,
        "--metrics-dir", metrics_dir,
    ]


class Served(Protocol):
    """What a child serves: a ``FramedServer``."""

    @property
    def stopping(self) -> bool: ...

    def start(self) -> object: ...

    def request_stop(self) -> None: ...

    def request_reload(self) -> None: ...

    def serve_forever(self, grace_s: float) -> None: ...


@dataclass
class Inherited:
    """What a child gets from its parent (``command``)."""

    listener: socket.socket
    table: StatsTable
    slot: int
    parent: int
    options: str
    metrics_dir: str

    def stats(self) -> ServerStats:
        return ServerStats(self.table, self.slot)

    def accept_gate(self) -> bool:
        return self.table.may_accept(self.slot)


def inherit(argv: list[str] | None, prog: str, layout: StatsLayout, log_level: Callable[[str], int]) -> Inherited:
    """Parses a child's command line (``command``), attaches the parent's
    stats table of ``layout``, and logs to stderr at ``log_level(options)``
    with the child's slot in every line."""
    parser = argparse.ArgumentParser(prog=prog, description="one child process of a server (never run by hand)")
    for name in ("--listen-fd", "--stats-fd", "--slots", "--slot", "--parent"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--options", required=True, help="the server's options, JSON")
    parser.add_argument("--metrics-dir", required=True, help="where this process's store metrics go")
    args = parser.parse_args(argv)
    # A reload asked for while starting would kill the process: it loads
    # the files fresh anyway.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level(args.options), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s %(name)s (process {args.slot}, pid %(process)d): %(message)s",
    )
    return Inherited(socket.socket(fileno=args.listen_fd), StatsTable.attach(args.stats_fd, args.slots, layout),
                     args.slot, args.parent, args.options, args.metrics_dir)


def _watch_parent(parent: int, server: Served) -> None:
    """Stops the server once the parent is gone (killed with SIGKILL, say):
    an orphan would hold the port and serve unsupervised."""
    while not server.stopping:
        if os.getppid() != parent:
            log.warning("the parent process %d is gone: stopping", parent)
            server.request_stop()
            return
        time.sleep(ORPHAN_CHECK_S)


def serve(server: Served, inherited: Inherited, grace_s: float, store_snapshot: Callable[[], Any]) -> None:
    """Serves until SIGTERM or SIGINT (or the parent is gone), then
    finishes the calls in flight within ``grace_s``; meanwhile writes
    ``store_snapshot()`` for the parent's /metrics."""
    on_signals({signal.SIGTERM: server.request_stop, signal.SIGINT: server.request_stop,
                signal.SIGHUP: server.request_reload})
    server.start()
    inherited.table.mark_ready(inherited.slot)
    threading.Thread(target=_watch_parent, args=(inherited.parent, server), name="pinlater-parent-watch",
                     daemon=True).start()
    stop_writing = threading.Event()
    writer = shared_metrics.keep_writing(inherited.metrics_dir, store_snapshot, stop_writing)
    try:
        server.serve_forever(grace_s=grace_s)
    finally:
        stop_writing.set()
        writer.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    inherited = inherit(argv, "pinlater.thrift.child", PINLATER,
                        lambda options: WorkerOptions.from_json(options).log_level)
    options = WorkerOptions.from_json(inherited.options)
    try:
        settings = Settings.from_env()
        service = JobService.from_settings(
            settings, source=f"pinlater-server-{inherited.listener.getsockname()[1]}-{inherited.slot}"
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = ThriftServer(
            service,
            metrics_port=None,
            max_frame_bytes=options.max_frame_bytes,
            max_connections=options.max_connections,
            max_concurrent_calls=options.max_concurrent_calls,
            listener=inherited.listener,
            stats=inherited.stats(),
            accept_gate=inherited.accept_gate,
        )
        serve(server, inherited, options.grace_s, service.operators.store_metrics_snapshot)
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
