"""The one loader of named SQL blocks (the MySQL store kind's ``sql/*.sql``,
the app-data layer's and the bulk backfill's), each file parsed once.

A block starts at a line ``-- name: NAME`` and runs to the next such line;
blank and comment lines are dropped. ``sql()`` fills the placeholders the
file documents. Identifiers are the only text ever interpolated, and each is
checked against a strict regex right here, at the point of interpolation;
every value travels as a driver parameter.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache, partial
from importlib import resources

_QUEUE = re.compile(r"[A-Za-z0-9_]{1,50}")
_TABLE = re.compile(r"q_[A-Za-z0-9_]{1,50}_p[1-9][0-9]{0,2}")
_TABLE_PARTS = re.compile(r"q_([A-Za-z0-9_]{1,50})_p([1-9][0-9]{0,2})")
_DATABASE = re.compile(r"[A-Za-z0-9_]{1,64}")
_NAME_LINE = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_LEFTOVER = re.compile(r"\{[a-z_]+\}")
MAX_PRIORITY = 100


def job_table(queue: str, priority: int) -> str:
    """The table of (queue, priority): ``q_<queue>_p<priority>``. The queue
    name was validated by the service already; it is checked again because
    it becomes part of the SQL text."""
    if not isinstance(queue, str) or not _QUEUE.fullmatch(queue):
        raise ValueError(f"queue name {queue!r} is not a safe table name part")
    if type(priority) is not int or not 1 <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority {priority!r} must be an int in 1..{MAX_PRIORITY}")
    return f"q_{queue}_p{priority}"


def is_job_table(name: str) -> bool:
    """Whether ``name`` is a table of ``job_table``'s form."""
    return bool(_TABLE.fullmatch(name))


def job_table_parts(name: str) -> tuple[str, int]:
    """The (queue, priority) of ``job_table``'s table ``name``."""
    match = _TABLE_PARTS.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a job table's name")
    return match.group(1), int(match.group(2))


def parse_blocks(text: str) -> dict[str, str]:
    """NAME -> statement text (comments dropped, ``{now}`` resolved)."""
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
    out = {name: "\n".join(lines) for name, lines in blocks.items()}
    now = out.get("_now")
    if now is not None:
        out = {name: stmt.replace("{now}", now) for name, stmt in out.items()}
    return out


@cache
def _blocks(package: str, resource: str) -> dict[str, str]:
    text = resources.files(package).joinpath(resource).read_text("utf-8")
    return parse_blocks(text)


@lru_cache(maxsize=4096, typed=True)  # typed: 7.0 must not find the entry of 7
def render(
    package: str,
    resource: str,
    name: str,
    *,
    table: str | None = None,
    database: str | None = None,
    rows: int = 0,
    ids: int = 0,
    body: bool = False,
    trace: bool = False,
    fkey: bool = False,
    exact_claim: bool = False,
    priority: int | None = None,
    page: str | None = None,
    step: int = 1,
    queue: str | None = None,
) -> str:
    """The statement ``name`` of ``<package>/<resource>`` with its
    placeholders filled.

    ``rows``: how many copies of the block ``<name>.row`` replace ``{rows}``
    (joined by UNION ALL for SELECT rows, by commas for VALUES tuples);
    a row's ``{offset}`` is its index times ``step`` (the ids a multi-row
    INSERT gave are its first plus each row's offset).
    ``ids``: how many ``%s`` markers replace ``{ids}`` (an IN list).
    ``body``: whether ``{body}`` selects the body column or NULL.
    ``trace``: whether ``{trace}`` selects the trace column or NULL.
    ``fkey``: whether ``{fkey}`` is the fkey column or NULL.
    ``exact_claim``: whether ``{held}`` is the whole claim column (items
    that name their claim) or its source part (items that give a source).
    ``priority``: the number (1..MAX_PRIORITY) that replaces ``{priority}``.
    ``page``: a statement this function made from the same file, which
    replaces ``{page}`` (a derived table).
    ``queue``: a queue name, which replaces ``{queue}`` as a string literal
    (in a statement that cannot take parameters, such as a trigger's body).
    """
    blocks = _blocks(package, resource)
    stmt = blocks[name]
    if "{page}" in stmt:
        if page is None:
            raise ValueError(f"{name}: needs the statement of its page")
        stmt = stmt.replace("{page}", page)
    if "{table}" in stmt:
        if table is None or not _TABLE.fullmatch(table):
            raise ValueError(f"{name}: unsafe or missing table name {table!r}")
        stmt = stmt.replace("{table}", f"`{table}`")
    if "{database}" in stmt:
        if database is None or not _DATABASE.fullmatch(database):
            raise ValueError(f"{name}: unsafe or missing database name {database!r}")
        stmt = stmt.replace("{database}", f"`{database}`")
    if "{rows}" in stmt:
        if rows < 1:
            raise ValueError(f"{name}: needs at least one row")
        row = blocks[f"{name}.row"]
        joiner = "\nUNION ALL " if row.lstrip().upper().startswith("SELECT") else ",\n"
        if "{offset}" in row:
            if type(step) is not int or step < 1:
                raise ValueError(f"{name}: step must be a positive int, got {step!r}")
            copies = [row.replace("{offset}", str(k * step)) for k in range(rows)]
        else:
            copies = [row] * rows
        stmt = stmt.replace("{rows}", joiner.join(copies))
    if "{ids}" in stmt:
        if ids < 1:
            raise ValueError(f"{name}: needs at least one id")
        stmt = stmt.replace("{ids}", ", ".join(["%s"] * ids))
    stmt = stmt.replace("{body}", "body" if body else "NULL")
    stmt = stmt.replace("{trace}", "trace" if trace else "NULL")
    stmt = stmt.replace("{fkey}", "fkey" if fkey else "NULL")
    stmt = stmt.replace("{held}", "claim" if exact_claim else "SUBSTRING(claim, 18)")
    if "{queue}" in stmt:
        if queue is None or not _QUEUE.fullmatch(queue):
            raise ValueError(f"{name}: unsafe or missing queue name {queue!r}")
        stmt = stmt.replace("{queue}", f"'{queue}'")
    if "{priority}" in stmt:
        if type(priority) is not int or not 1 <= priority <= MAX_PRIORITY:
            raise ValueError(f"{name}: priority must be an int in 1..{MAX_PRIORITY}, got {priority!r}")
        stmt = stmt.replace("{priority}", str(priority))
    leftover = _LEFTOVER.search(stmt)
    if leftover:
        raise ValueError(f"{name}: unfilled placeholder {leftover.group(0)}")
    return stmt


def named_blocks(package: str, resource: str) -> partial[str]:
    """``render`` bound to one file: ``blocks(name, table=...)``."""
    return partial(render, package, resource)
