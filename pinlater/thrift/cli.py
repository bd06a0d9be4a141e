"""``pinlater server`` and ``pinlater server-stats``.

``pinlater server`` runs the Thrift server over the shards and control store
of the PINLATER_* settings, and the monitor (claim timeouts, GC) in a
thread. Where the monitor runs as its own process (the Procfile's
``monitor: pinlater monitor``), start the server with ``--no-monitor``.
SIGTERM or SIGINT: stop accepting, finish the calls in flight, exit.
SIGHUP: read the TLS certificate, key, client CA and roles files again.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import urllib.request
from typing import Any

from pinlater.kit.cli_output import print_result
from pinlater.kit.signals import on_signals
from pinlater.kit.urls import redact
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import MAX_SERVER_PROCESSES, Settings, parse_server_processes
from pinlater.thrift import supervisor
from pinlater.thrift.child import WorkerOptions
from pinlater.thrift.security import Security, check_exposure
from pinlater.thrift.server import ThriftServer

log = logging.getLogger(__name__)


def run_server(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    host = args.host or settings.server_host
    port = settings.server_port if args.port is None else args.port
    metrics_port = settings.metrics_port if args.metrics_port is None else args.metrics_port
    processes = _processes(args.processes, settings)
    try:
        security = Security.from_settings(settings)
        check_exposure(host, security, settings.server_insecure)
    except ValueError as exc:  # a TLS or roles file, or settings that do not go together
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if processes > 1:
        options = WorkerOptions(args.max_frame_bytes, args.max_connections, args.max_concurrent_calls, args.grace,
                                logging.getLogger().getEffectiveLevel())
        return supervisor.serve(settings, host, port, processes, options,
                                metrics_port=None if metrics_port < 0 else metrics_port,
                                monitor_interval_s=None if args.no_monitor else args.monitor_interval)
    service = JobService.from_settings(settings, source=f"pinlater-server-{host}-{port}")
    try:
        server = ThriftServer(
            service,
            host,
            port,
            metrics_port=None if metrics_port < 0 else metrics_port,
            max_frame_bytes=args.max_frame_bytes,
            max_connections=args.max_connections,
            max_concurrent_calls=args.max_concurrent_calls,
            security=security,
        )
    except OSError as exc:
        service.close()
        print(f"error: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    monitor = None
    if not args.no_monitor:
        monitor = Monitor(service.operators, interval_s=args.monitor_interval)
        monitor.start_thread()
    on_signals({signal.SIGTERM: server.request_stop, signal.SIGINT: server.request_stop,
                signal.SIGHUP: server.request_reload})
    server.start()
    metrics = f", metrics on http://{host}:{server.metrics.port}/metrics" if server.metrics else ""
    print(f"pinlater server listening on {host}:{server.port}{metrics}", flush=True)
    try:
        server.serve_forever(grace_s=args.grace)
    finally:
        if monitor is not None:
            monitor.stop()
        service.close()
    return 0


def _processes(flag: str | None, settings: Settings) -> int:
    if flag is None:
        return settings.server_processes
    try:
        return parse_server_processes(flag)
    except ValueError as exc:
        raise ValueError(f"--processes: {exc}") from None


def run_server_stats(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    url = args.url or f"http://{settings.server_host}:{settings.metrics_port}"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/stats.json", timeout=5) as response:
            stats: dict[str, Any] = json.loads(response.read())
    except OSError as exc:
        print(f"error: cannot read server stats from {redact(url)}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    methods: dict[str, dict[str, Any]] = stats.pop("methods")
    processes: list[dict[str, Any]] = stats.pop("processes", [])
    print(" ".join(f"{k}={v}" for k, v in stats.items()))
    for p in processes:
        print(" ".join(f"{k}={v}" for k, v in p.items()))
    rows = [
        {"method": name, "requests": m["requests"], "errors": m["errors"], "p50_ms": m["p50_ms"], "p99_ms": m["p99_ms"]}
        for name, m in methods.items()
    ]
    print_result(args, rows or [{"method": "(no calls yet)", "requests": 0, "errors": 0, "p50_ms": 0, "p99_ms": 0}])
    return 0


def add_server_command(sub: Any) -> None:
    """Adds ``server`` to the ``pinlater`` parser (entry point
    ``pinlater.commands``). It sets ``run``: the CLI calls ``run(args)``
    instead of opening a client."""
    p = sub.add_parser("server", help="run the PinLater Thrift server",
                       description="Run the PinLater Thrift server (framed, binary) and, unless --no-monitor, "
                                   "the monitor. Use --no-monitor when `pinlater monitor` runs separately.")
    p.set_defaults(run=run_server, long_running=True)
    p.add_argument("--host", help="address to bind (default $PINLATER_SERVER_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default $PINLATER_SERVER_PORT or 9010; 0 picks one)")
    p.add_argument("--metrics-port", type=int,
                   help="HTTP port of /metrics and /stats.json (default $PINLATER_METRICS_PORT or 9011; -1: none)")
    p.add_argument("--no-monitor", action="store_true",
                   help="do not run the monitor here (a separate `pinlater monitor` process runs it)")
    p.add_argument("--monitor-interval", type=float, default=5.0, help="seconds between monitor passes")
    p.add_argument("--max-connections", type=int,
                   help="open client connections, a thread each (default $PINLATER_SERVER_MAX_CONNECTIONS or 1024); "
                        "see also PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT, _MAX_BUFFERED_BYTES, _FRAME_TIMEOUT_S")
    p.add_argument("--max-concurrent-calls", type=int, default=64,
                   help="calls run at once; keep it below the shard clients' connection pools")
    p.add_argument("--max-frame-bytes", type=int, help="largest request accepted (default 16 bodies + 1 MiB)")
    p.add_argument("--grace", type=float, default=30.0, help="seconds to let calls finish on SIGTERM")
    p.add_argument("--processes", metavar="N",
                   help="server processes sharing the port, each with its own connections to the stores "
                        f"(1 to {MAX_SERVER_PROCESSES}; default $PINLATER_SERVER_PROCESSES or 1)")


def add_server_stats_command(sub: Any) -> None:
    """Adds ``server-stats`` to the ``pinlater`` parser, like ``server``."""
    p = sub.add_parser("server-stats", help="show a running server's request stats",
                       description="Requests, errors and p50/p99 latency per method of a running server.")
    p.set_defaults(run=run_server_stats)
    p.add_argument("--url", help="metrics base URL (default http://$PINLATER_SERVER_HOST:$PINLATER_METRICS_PORT)")
