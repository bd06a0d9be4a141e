"""Named SQL blocks in ``.sql`` files, parsed once by the kit's parser
(``pinlater.kit.sqlblocks``; the style of the job
service's ``sql/mysql.sql``). ``sql`` is the app-data layer's own file,
``sql/appdata.sql``; other task packages load theirs with ``SqlFile``
(the bulk backfill's ``tasks/backfill/sql/backfill.sql``).

Identifiers are the only text ever interpolated: a shard database name
(checked against a strict regex) and a table name (checked against the
file's fixed list of tables). Every value travels as a driver parameter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection
from functools import cache, lru_cache
from importlib import resources

from pinlater.kit.sqlblocks import parse_blocks
from tasks.appdata.tables import TABLE_NAMES

_DATABASE = re.compile(r"[A-Za-z0-9_]{1,50}s[0-9]{5}")
_LEFTOVER = re.compile(r"\{[a-z_]+\}")
_COLUMNS = re.compile(r"\(([a-z_, ]+)\)\s*VALUES")


class SqlFile:
    """The blocks of ``path`` in ``package``; calling it renders one:
    ``statements(name, database=..., table=..., ids=n, rows=n, pairs=n)``."""

    def __init__(self, package: str, path: str, tables: Collection[str]) -> None:
        self._package, self._path, self._tables = package, path, frozenset(tables)
        self._blocks: Callable[[], dict[str, str]] = cache(self._read)
        self._render = lru_cache(maxsize=8192)(self._render_uncached)

    def _read(self) -> dict[str, str]:
        return parse_blocks(resources.files(self._package).joinpath(self._path).read_text("utf-8"))

    def __call__(
        self, name: str, *, database: str | None = None, table: str | None = None, ids: int = 0, rows: int = 0,
        pairs: int = 0,
    ) -> str:
        return self._render(name, database, table, ids, rows, pairs)

    def _render_uncached(
        self, name: str, database: str | None, table: str | None, ids: int, rows: int, pairs: int
    ) -> str:
        stmt = self._blocks()[name]
        if "{database}" in stmt:
            if database is None or not _DATABASE.fullmatch(database):
                raise ValueError(f"{name}: unsafe or missing database name {database!r}")
            stmt = stmt.replace("{database}", f"`{database}`")
        if "{table}" in stmt:
            if table not in self._tables:
                raise ValueError(f"{name}: unknown table {table!r}")
            stmt = stmt.replace("{table}", f"`{table}`")
        if "{ids}" in stmt:
            if ids < 1:
                raise ValueError(f"{name}: needs at least one id")
            stmt = stmt.replace("{ids}", ", ".join(["%s"] * ids))
        if "{pairs}" in stmt:
            if pairs < 1:
                raise ValueError(f"{name}: needs at least one pair")
            stmt = stmt.replace("{pairs}", ", ".join(["(%s, %s)"] * pairs))
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


sql = SqlFile("tasks.appdata", "sql/appdata.sql", TABLE_NAMES)

# Packed reads return many rows as one aggregate (GROUP_CONCAT or
# JSON_ARRAYAGG), parsed in one call: a tenth of the client's CPU for the
# same rows. MariaDB cuts an aggregate at ``group_concat_max_len`` (with a
# warning), and gives NULL past ``max_allowed_packet``; readers check what
# they got and read a cut group row by row instead.
PACKED_MAX_BYTES = 16 * 1024 * 1024


def packed(stmt: str) -> str:
    """``stmt`` run with its aggregates allowed ``PACKED_MAX_BYTES``."""
    return f"SET STATEMENT group_concat_max_len = {int(PACKED_MAX_BYTES)} FOR {stmt}"


# A packed group as a re-read can check it cheaply: how many rows it had and
# the SHA-256 (hex) of its text, as MariaDB's SHA2(text, 256) gives it. A
# group the client could not read whole has the digest "", which no
# re-read gives, so it never counts as unchanged. Equal digests mean equal
# text, so equal rows: what a reader needs to reuse what it parsed.
Digest = tuple[int, str | None]


def digest(count: int, text: str | bytes | None, whole: bool = True) -> Digest:
    """The digest of a packed group of ``count`` rows as read (``whole``:
    the reader parsed it all, rather than finding it cut)."""
    if not whole:
        return count, ""
    if text is None:
        return count, None
    return count, hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def packed_pairs(text: str | bytes | None, count: int) -> dict[int, int] | None:
    """``{a: b}`` from a packed ``"a b a b ..."`` of ``count`` pairs of
    integers; None when it was cut."""
    pairs = packed_list(text, count)
    return None if pairs is None else dict(pairs)


def packed_list(text: str | bytes | None, count: int) -> list[tuple[int, int]] | None:
    """``[(a, b), ...]`` in order from a packed ``"a b a b ..."`` of
    ``count`` pairs of integers; None when it was cut (a cut can end inside
    a number, so the length alone says so: a whole one is shorter than the
    limit)."""
    if count == 0:
        return []
    if text is None or len(text) >= PACKED_MAX_BYTES:
        return None
    parts = (text.decode() if isinstance(text, bytes) else text).split()
    if len(parts) != 2 * count:
        return None
    return list(zip(map(int, parts[::2]), map(int, parts[1::2]), strict=True))
