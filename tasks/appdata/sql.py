"""The named SQL blocks of ``sql/appdata.sql``, parsed once (the style of
the job service's ``sql/mysql.sql``; this is the app-data layer's own file).

Identifiers are the only text ever interpolated: a shard database name
(checked against a strict regex) and a table name (checked against the fixed
list of tables). Every value travels as a driver parameter.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from importlib import resources

from tasks.appdata.tables import TABLE_NAMES

_DATABASE = re.compile(r"[A-Za-z0-9_]{1,50}s[0-9]{5}")
_NAME_LINE = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_LEFTOVER = re.compile(r"\{[a-z_]+\}")
_COLUMNS = re.compile(r"\(([a-z_, ]+)\)\s*VALUES")


def parse_blocks(text: str) -> dict[str, str]:
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            name = match.group(1)
            if name in blocks:
                raise ValueError(f"duplicate SQL block {name!r}")
            current = blocks[name] = []
        elif current is not None and line.strip() and not line.lstrip().startswith("--"):
            current.append(line.rstrip())
    return {name: "\n".join(lines) for name, lines in blocks.items()}


@cache
def _blocks() -> dict[str, str]:
    text = resources.files("tasks.appdata").joinpath("sql/appdata.sql").read_text("utf-8")
    return parse_blocks(text)


@lru_cache(maxsize=8192)
def sql(name: str, *, database: str | None = None, table: str | None = None, ids: int = 0, rows: int = 0) -> str:
    stmt = _blocks()[name]
    if "{database}" in stmt:
        if database is None or not _DATABASE.fullmatch(database):
            raise ValueError(f"{name}: unsafe or missing database name {database!r}")
        stmt = stmt.replace("{database}", f"`{database}`")
    if "{table}" in stmt:
        if table not in TABLE_NAMES:
            raise ValueError(f"{name}: unknown table {table!r}")
        stmt = stmt.replace("{table}", f"`{table}`")
    if "{ids}" in stmt:
        if ids < 1:
            raise ValueError(f"{name}: needs at least one id")
        stmt = stmt.replace("{ids}", ", ".join(["%s"] * ids))
    if "{rows}" in stmt:
        columns = _COLUMNS.search(stmt)
        if rows < 1 or columns is None:
            raise ValueError(f"{name}: needs at least one row and a column list")
        width = columns.group(1).count(",") + 1
        row = "(" + ", ".join(["%s"] * width) + ")"
        stmt = stmt.replace("{rows}", ", ".join([row] * rows))
    leftover = _LEFTOVER.search(stmt)
    if leftover:
        raise ValueError(f"{name}: unfilled placeholder {leftover.group(0)}")
    return stmt
