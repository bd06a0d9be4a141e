"""What the task packages' command-line tools share: every error is one
line on stderr, never a traceback (``-v`` shows it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from tasks.hbase.errors import one_line


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


def run_command(
    args: argparse.Namespace, describe: Callable[[Exception], str], status: Callable[[Exception], int]
) -> int:
    """``args.fn(args)``; an error printed as ``error: <describe(exc)>`` with
    exit status ``status(exc)``, or raised with ``args.verbose``."""
    try:
        return int(args.fn(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 -- one line, not a traceback
        if args.verbose:
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        return status(exc)
