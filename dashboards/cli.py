"""``pinlater dashboard``: run the operators' status dashboard.

Settings come from the PINLATER_* environment (``pinlater.settings``):
PINLATER_DASHBOARD_HOST / _PORT (127.0.0.1:8080), PINLATER_DASHBOARD_TOKEN
(controls are refused without it), PINLATER_DASHBOARD_PROTECT_READS,
PINLATER_FLOWER_URL; each installed panel (``dashboards.panels``) reads
settings of its own. SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from pinlater.kit.signals import on_signals

log = logging.getLogger(__name__)


def run_dashboard(args: argparse.Namespace) -> int:
    # Imported here so that `pinlater --help` does not load the dashboard.
    from dashboards.server import Dashboard
    from pinlater.settings import Settings

    settings = Settings.from_env()
    try:
        dashboard = Dashboard.from_settings(
            settings, host=args.host, port=args.port, refresh_s=args.refresh, rate_window_minutes=args.rate_window
        )
    except (OSError, ValueError) as exc:
        print(f"error: cannot start the dashboard: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    on_signals({signal.SIGTERM: stop.set, signal.SIGINT: stop.set})
    dashboard.start()
    controls = "enabled" if settings.dashboard_token_sha256 else "DISABLED (set PINLATER_DASHBOARD_TOKEN)"
    if not dashboard.http.loopback and not settings.dashboard_protect_reads:
        log.warning("dashboard bound to %s with open read-only views; "
                    "set PINLATER_DASHBOARD_PROTECT_READS=1 to require the token", dashboard.url)
    print(f"pinlater dashboard on {dashboard.url}/ (controls {controls})", flush=True)
    try:
        stop.wait()
    finally:
        dashboard.close()
    return 0


def add_dashboard_command(sub: Any) -> None:
    """Adds ``dashboard`` to the ``pinlater`` parser (entry point
    ``pinlater.commands``); like ``server`` it sets ``run``, so the CLI calls
    ``run(args)`` instead of opening a client."""
    p = sub.add_parser("dashboard", help="run the operators' status dashboard (HTTP)",
                       description="Serve the status dashboard, its JSON API and /metrics.")
    p.set_defaults(run=run_dashboard, long_running=True)
    p.add_argument("--host", help="address to bind (default $PINLATER_DASHBOARD_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default $PINLATER_DASHBOARD_PORT or 8080; 0 picks one)")
    p.add_argument("--refresh", type=float, default=2.0,
                   help="seconds between reads of the shards (shared by every viewer) and page updates")
    p.add_argument("--rate-window", type=int, default=5, help="minutes the event rates are averaged over")
