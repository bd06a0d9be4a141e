"""The tiny app's command: ``pinlater app tinyapp queue`` prints the
config its manifest gives its queue."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pinlater.kit.cli_runner import ErrorStyle, command_parser, run
from tests.support.tinyapp.app import APP, QUEUE


def cmd_queue(_args: argparse.Namespace) -> int:
    config = APP.queue(QUEUE)
    print(f"{config.name}  claim timeout {config.claim_timeout_ms} ms  {config.retry.kind} retries "
          f"{config.retry.retries}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser, sub = command_parser("pinlater app tinyapp", "The tiny app's command.")
    sub.add_parser("queue", help="print the app's queue and its config").set_defaults(fn=cmd_queue)
    return run(parser, argv, ErrorStyle())
