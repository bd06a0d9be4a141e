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
from dataclasses import asdict, dataclass

from pinlater.kit.signals import on_signals
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.thrift import shared_metrics
from pinlater.thrift.server import ThriftServer
from pinlater.thrift.stats import ServerStats, StatsTable

log = logging.getLogger(__name__)

# How often a child checks that its parent is still there.
ORPHAN_CHECK_S = 0.5


@dataclass(frozen=True)
class WorkerOptions:
    """The server options every child gets (the rest come from the PINLATER_*
    settings, inherited with the environment)."""

    max_frame_bytes: int | None = None
    max_connections: int | None = None
    max_concurrent_calls: int = 64
    grace_s: float = 30.0
    log_level: int = logging.INFO

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerOptions:
        return cls(**json.loads(text))


def command(
    listen_fd: int, stats_fd: int, slots: int, slot: int, options: WorkerOptions, metrics_dir: str
) -> list[str]:
    """The command line that runs child ``slot``."""
    return [
        sys.executable, "-m", "pinlater.thrift.child", "--listen-fd", str(listen_fd), "--stats-fd", str(stats_fd),
        "--slots", str(slots), "--slot", str(slot), "--parent", str(os.getpid()), "--options", options.to_json(),
        "--metrics-dir", metrics_dir,
    ]


def _watch_parent(parent: int, server: ThriftServer) -> None:
    """Stops the server once the parent is gone (killed with SIGKILL, say):
    an orphan would hold the port and serve unsupervised."""
    while not server.stopping:
        if os.getppid() != parent:
            log.warning("the parent process %d is gone: stopping", parent)
            server.request_stop()
            return
        time.sleep(ORPHAN_CHECK_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pinlater.thrift.child", description=__doc__)
    for name in ("--listen-fd", "--stats-fd", "--slots", "--slot", "--parent"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--options", type=WorkerOptions.from_json, required=True)
    parser.add_argument("--metrics-dir", required=True, help="where this process's store metrics go")
    args = parser.parse_args(argv)
    # A reload asked for while starting would kill the process: it loads
    # the files fresh anyway.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    options: WorkerOptions = args.options
    logging.basicConfig(
        level=options.log_level, stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s %(name)s (process {args.slot}, pid %(process)d): %(message)s",
    )
    listener = socket.socket(fileno=args.listen_fd)
    table = StatsTable.attach(args.stats_fd, args.slots)
    try:
        settings = Settings.from_env()
        service = JobService.from_settings(
            settings, source=f"pinlater-server-{listener.getsockname()[1]}-{args.slot}"
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
            listener=listener,
            stats=ServerStats(table, args.slot),
            accept_gate=lambda: table.may_accept(args.slot),
        )
        on_signals({signal.SIGTERM: server.request_stop, signal.SIGINT: server.request_stop,
                    signal.SIGHUP: server.request_reload})
        server.start()
        table.mark_ready(args.slot)
        threading.Thread(target=_watch_parent, args=(args.parent, server), name="pinlater-parent-watch",
                         daemon=True).start()
        stop_writing = threading.Event()
        writer = shared_metrics.keep_writing(args.metrics_dir, service.operators.store_metrics_snapshot, stop_writing)
        try:
            server.serve_forever(grace_s=options.grace_s)
        finally:
            stop_writing.set()
            writer.join(timeout=5)
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
