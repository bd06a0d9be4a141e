"""``pinlater migrate [--dry-run]``: bring every shard and the control store
named by the PINLATER_* settings up to the current storage layout, one
step at a time, printing each step (``pinlater.stores.migrations``).
Idempotent: a store already current is left alone, and a run stopped by a
crash or an outage resumes where it stopped when run again."""

from __future__ import annotations

import argparse
from typing import Any

from pinlater.settings import Settings
from pinlater.stores.migrations import migrate


def run_migrate(args: argparse.Namespace) -> int:
    migrate(Settings.from_env(), dry_run=args.dry_run, say=lambda line: print(line, flush=True))
    return 0


def add_migrate_command(subparsers: Any) -> None:
    text = "bring every shard and the control store up to the current storage layout"
    p = subparsers.add_parser("migrate", help=text, description=text)
    p.add_argument("--dry-run", action="store_true", help="print the steps without running them")
    p.set_defaults(run=run_migrate)
