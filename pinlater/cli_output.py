"""How ``pinlater`` commands print their answer: a table of rows, or JSON
(with --json, or for anything that is not a list of rows). Shared by the
core commands and the ones other packages register (``pinlater.cli_commands``)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def print_result(args: argparse.Namespace, data: Any) -> None:
    if args.json or not isinstance(data, list) or not data or not isinstance(data[0], dict):
        print(json.dumps(data, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in data[0]:
        table.add_column(column)
    for row in data:
        table.add_row(*(str(v) for v in row.values()))
    Console().print(table)


# Where a command's packages are missing: the extras are in pyproject.toml.
INSTALL_HINT = "install the extra that provides it, e.g. pip install 'pinlater-py[all]'"


def one_line(text: str) -> str:
    return " ".join(text.split())
