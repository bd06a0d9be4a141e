"""Subcommands other packages add to ``pinlater`` (the Thrift server, the
dashboard, ...), found through the ``pinlater.commands`` entry-point group so
that the core CLI imports nothing above it.

Each entry point's name is the command's name and its value a function
``register(subparsers)`` that adds that one command. The command sets either
``fn`` (the CLI opens a ``JobService`` from the settings, calls ``fn(client,
args)`` and prints what it returns) or ``run`` (the CLI calls ``run(args)``,
which returns the exit status); and, if it runs until stopped,
``long_running=True`` (it logs at INFO). A command whose
entry point cannot be loaded (its extra is not installed) is still listed;
running it prints one line saying why, and the other commands work.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pinlater.kit.cli_output import INSTALL_HINT, one_line

GROUP = "pinlater.commands"


def register_commands(sub: Any) -> None:
    for entry in entry_points(group=GROUP):
        try:
            register = entry.load()
        except Exception as exc:  # noqa: BLE001 -- one command's missing extra must not break the others
            _add_unavailable(sub, entry, exc)
            continue
        register(sub)


def _add_unavailable(sub: Any, entry: EntryPoint, exc: Exception) -> None:
    reason = f"{type(exc).__name__}: {one_line(str(exc))}"
    p = sub.add_parser(entry.name, help=f"(unavailable: {reason})", add_help=False, prefix_chars="\0")
    p.add_argument("ignored", nargs="*", help=argparse.SUPPRESS)

    def refuse(_args: argparse.Namespace) -> int:
        print(f"error: `pinlater {entry.name}` is unavailable: {reason} ({INSTALL_HINT})", file=sys.stderr)
        return 2

    p.set_defaults(run=refuse)
