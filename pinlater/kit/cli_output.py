"""How ``pinlater`` commands print their answer: a table of rows, or JSON
(with --json, or for anything that is not a list of rows), and errors as one
line. Shared by the core commands, the ones other packages register
(``pinlater.cli_commands``) and the HTTP servers' errors (``pinlater.kit.httpserver``)."""

from __future__ import annotations

import argparse
import json
import re
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


# A Java stack frame ("\tat org.apache.Foo.bar(Foo.java:42)"): HBase's
# servers send whole stack traces as their error messages.
_JAVA_FRAME = re.compile(r"\n\s*at [\w$.<>/]+\(")


def one_line(text: object, limit: int = 300) -> str:
    """``text`` (a message, an exception, bytes) as one line for an error
    message: cut where a Java stack trace starts, every run of whitespace
    (line breaks too) one space, at most ``limit`` characters ("..." ends a
    cut one)."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "replace")
    message = str(text)
    frame = _JAVA_FRAME.search(message)
    line = " ".join((message if frame is None else message[: frame.start()]).split())
    return line if len(line) <= limit else line[: max(0, limit - 3)] + "..."
