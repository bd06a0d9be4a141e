"""Mapping tables: (from_id, to_id, sequence) rows on the shard of
``from_id``, one direction per table (``tasks.appdata.tables``).

Order: newest first, by sequence then to_id (both descending). A page walk
carries a ``Cursor`` (the last row's sequence and to_id) and each page reads
strictly past it (keyset paging, never OFFSET), so a walk is stable while
rows change under it:

- a row present when the walk starts and not removed before the walk
  reaches it is seen exactly once;
- a row removed before the walk reaches it is not seen;
- a row added during the walk with a sequence above the cursor (with
  sequence = action time, every new follow) is not seen, and a pair removed
  and added again gets a new, higher sequence, so it is never seen twice.
  Adding a pair that exists keeps its sequence (nothing moves).

Cursors are plain text (``"<sequence>:<to_id>"``) so a chained job can
carry one in its body.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pymysql.cursors import Cursor as DbCursor

from tasks.appdata.ids import expect_type, shard_of
from tasks.appdata.sql import Digest, digest, packed, packed_list, packed_pairs, sql
from tasks.appdata.store import AppData
from tasks.appdata.tables import MappingTable

MAX_PAGE = 10_000
IN_LIST_MAX = 1000
# Pairs sent as one JSON argument (``map_count_sequences_to``): no
# placeholder per value for the client to escape or the server to parse,
# and a page of a write job in one statement.
PAIRS_MAX = 10_000
_CURSOR = re.compile(r"(-?[0-9]{1,19}):([0-9]{1,20})")
SEQUENCE_MIN = -(1 << 63)
SEQUENCE_MAX = (1 << 63) - 1
TO_ID_MAX = (1 << 64) - 1  # above every id: a cursor at (s, TO_ID_MAX) reads rows at s too


@dataclass(frozen=True, slots=True)
class Edge:
    to_id: int
    sequence: int


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a walk stopped: the last row returned."""

    sequence: int
    to_id: int

    def encode(self) -> str:
        return f"{self.sequence}:{self.to_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        match = _CURSOR.fullmatch(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueError(f"not a mapping cursor: {str(text)[:100]!r}")
        sequence, to_id = int(match.group(1)), int(match.group(2))
        # The columns' ranges: a number past them is no row's, and the
        # store would refuse it with an error of its own.
        if not SEQUENCE_MIN <= sequence <= SEQUENCE_MAX or to_id > TO_ID_MAX:
            raise ValueError(f"mapping cursor {text.strip()!r} is out of range")
        return cls(sequence, to_id)


@dataclass(frozen=True, slots=True)
class Page:
    edges: list[Edge]
    next: Cursor | None  # None: the walk is over

    @property
    def ids(self) -> list[int]:
        return [e.to_id for e in self.edges]


def _check(table: MappingTable, from_id: int, to_id: int | None = None) -> int:
    shard = shard_of(from_id, table.from_type)
    if to_id is not None:
        shard_of(to_id, table.to_type)
    return shard


def _check_sequence(sequence: int) -> None:
    if type(sequence) is not int or not SEQUENCE_MIN <= sequence <= SEQUENCE_MAX:
        raise ValueError(f"sequence {sequence!r} must be a 64-bit signed integer")


def add(store: AppData, table: MappingTable, from_id: int, to_id: int, sequence: int) -> bool:
    """Map from_id -> to_id; True if added, False if the pair was there
    (its sequence is left as it was)."""
    shard = _check(table, from_id, to_id)
    _check_sequence(sequence)
    stmt = sql("map_add", database=store.locate(shard).database, table=table.name)
    return store.run(shard, lambda c, _db: c.execute(stmt, (from_id, to_id, sequence))) == 1


def add_many(store: AppData, table: MappingTable, rows: Iterable[tuple[int, int, int]], *, chunk: int = 5000) -> int:
    """Add ``(from_id, to_id, sequence)`` rows with multi-row INSERTs, grouped
    by the shard of from_id; how many were new."""
    by_shard: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for from_id, to_id, sequence in rows:
        _check_sequence(sequence)
        by_shard[_check(table, from_id, to_id)].append((from_id, to_id, sequence))
    added = 0
    for shard, shard_rows in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(shard_rows), chunk):
            part = shard_rows[start : start + chunk]
            stmt = sql("map_add_many", database=database, table=table.name, rows=len(part))
            added += store.run(shard, executor(stmt, [v for row in part for v in row]))
    return added


def executor(stmt: str, args: Sequence[Any]) -> Callable[[DbCursor, str], int]:
    def run(cursor: DbCursor, _database: str) -> int:
        return cursor.execute(stmt, args)

    return run


def remove(store: AppData, table: MappingTable, from_id: int, to_id: int) -> bool:
    """True if the pair was there."""
    shard = _check(table, from_id, to_id)
    stmt = sql("map_remove", database=store.locate(shard).database, table=table.name)
    return store.run(shard, lambda c, _db: c.execute(stmt, (from_id, to_id))) > 0


def exists(store: AppData, table: MappingTable, from_id: int, to_id: int) -> bool:
    shard = _check(table, from_id, to_id)
    stmt = sql("map_exists", database=store.locate(shard).database, table=table.name)
    return store.run(shard, lambda c, _db: c.execute(stmt, (from_id, to_id))) > 0


def existing(store: AppData, table: MappingTable, from_id: int, to_ids: Iterable[int]) -> set[int]:
    """Which of ``to_ids`` from_id maps to (one query per 1,000)."""
    return set(sequences(store, table, from_id, to_ids))


def sequences(store: AppData, table: MappingTable, from_id: int, to_ids: Iterable[int]) -> dict[int, int]:
    """The sequence of each of ``to_ids`` that from_id maps to (one query
    per 1,000); ids not mapped are left out."""
    shard = _check(table, from_id)
    wanted = list(dict.fromkeys(to_ids))
    for to_id in wanted:
        expect_type(to_id, table.to_type)
    database = store.locate(shard).database
    found: dict[int, int] = {}
    for start in range(0, len(wanted), IN_LIST_MAX):
        part = wanted[start : start + IN_LIST_MAX]
        stmt = sql("map_sequences", database=database, table=table.name, ids=len(part))
        rows = store.run(shard, fetcher(stmt, [from_id, *part]))
        found.update((int(to_id), int(sequence)) for to_id, sequence in rows)
    return found


def sequences_to(store: AppData, table: MappingTable, from_ids: Iterable[int], to_id: int) -> dict[int, int]:
    """The sequence of the row from each of ``from_ids`` (any shards) to
    ``to_id``; ids with no such row are left out. One query per shard and
    1,000 ids."""
    expect_type(to_id, table.to_type)
    by_shard: dict[int, list[int]] = defaultdict(list)
    for from_id in dict.fromkeys(from_ids):
        by_shard[_check(table, from_id)].append(from_id)
    found: dict[int, int] = {}
    for shard, ids in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(ids), IN_LIST_MAX):
            part = ids[start : start + IN_LIST_MAX]
            stmt = sql("map_sequences_to", database=database, table=table.name, ids=len(part))
            found.update((int(f), int(s)) for f, s in store.run(shard, fetcher(stmt, [to_id, *part])))
    return found


def unmapped_to(store: AppData, table: MappingTable, rows: Iterable[tuple[int, int]], to_id: int
                ) -> set[tuple[int, int]]:
    """Of ``(from_id, sequence)`` rows (any shards), those with no row from
    ``from_id`` to ``to_id`` at that sequence. Usually all are there: each
    shard's rows are counted first, up to ``PAIRS_MAX`` in one statement
    (one number back instead of a row each), and read only when the count
    falls short."""
    expect_type(to_id, table.to_type)
    by_shard: dict[int, list[tuple[int, int]]] = defaultdict(list)
    kind = table.from_type
    for row in dict.fromkeys(rows):
        from_id, sequence = row
        if type(sequence) is not int or not SEQUENCE_MIN <= sequence <= SEQUENCE_MAX:
            _check_sequence(sequence)
        by_shard[shard_of(from_id, kind)].append(row)
    missing: set[tuple[int, int]] = set()
    for shard, database, part in _pair_chunks(store, by_shard, PAIRS_MAX):
        stmt = sql("map_count_sequences_to", database=database, table=table.name)
        ((count,),) = store.run(shard, fetcher(stmt, [json.dumps(part), to_id]))
        if int(count) == len(part):
            continue
        now = sequences_to(store, table, (from_id for from_id, _s in part), to_id)
        missing.update((from_id, sequence) for from_id, sequence in part if now.get(from_id) != sequence)
    return missing


def _pair_chunks(store: AppData, by_shard: dict[int, list[tuple[int, int]]], step: int = IN_LIST_MAX // 2
                 ) -> Iterator[tuple[int, str, list[tuple[int, int]]]]:
    """Each shard's pairs, with its database, in chunks of ``step`` (by
    default 500: a pair is two of a statement's 1,000 arguments)."""
    for shard, wanted in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(wanted), step):
            yield shard, database, wanted[start : start + step]


def sequences_of_pairs(
    store: AppData, table: MappingTable, pairs: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], int]:
    """The sequence of each (from_id, to_id) row that exists among ``pairs``
    (any shards; one query per shard and 500 pairs, however many distinct
    to_ids they hold): a page's worth of point lookups in a few round trips."""
    by_shard: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for from_id, to_id in dict.fromkeys(pairs):
        by_shard[_check(table, from_id, to_id)].append((from_id, to_id))
    found: dict[tuple[int, int], int] = {}
    for shard, database, part in _pair_chunks(store, by_shard):
        stmt = sql("map_sequences_of_pairs", database=database, table=table.name, pairs=len(part))
        args = [value for pair in part for value in pair]
        found.update(((int(f), int(t)), int(s)) for f, t, s in store.run(shard, fetcher(stmt, args)))
    return found


def _by_shard_parts(
    store: AppData, table: MappingTable, from_ids: Iterable[int]
) -> Iterator[tuple[int, str, list[int]]]:
    """(shard, database, up to 1,000 ids) for each query of a many-ids read."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for from_id in dict.fromkeys(from_ids):
        by_shard[_check(table, from_id)].append(from_id)
    for shard, ids in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(ids), IN_LIST_MAX):
            yield shard, database, ids[start : start + IN_LIST_MAX]


def rows_from_many(
    store: AppData, table: MappingTable, from_ids: Iterable[int], digests: dict[int, Digest] | None = None
) -> dict[int, dict[int, int]]:
    """``{from_id: {to_id: sequence}}`` of every row of ``from_ids`` (any
    shards; one query per shard and 1,000 ids), each id's rows in to_id
    order. For pages of a backfill or a verify pass: the whole mapping of
    each id, so keep pages small when some ids have huge ones. ``digests``,
    when given, gets each from_id's digest of what was read (see
    ``digests_from_many``)."""
    out: dict[int, dict[int, int]] = {}
    for shard, database, part in _by_shard_parts(store, table, from_ids):
        stmt = packed(sql("map_rows_from_many_packed", database=database, table=table.name, ids=len(part)))
        cut: list[int] = []
        for from_id, found, text in store.run(shard, fetcher(stmt, part)):
            rows = packed_pairs(text, int(found))
            if rows is None:
                cut.append(int(from_id))
            else:
                out[int(from_id)] = rows
            if digests is not None:
                digests[int(from_id)] = digest(int(found), text, whole=rows is not None)
        if cut:  # a mapping too long to pack: its rows one by one
            stmt = sql("map_rows_from_many", database=database, table=table.name, ids=len(cut))
            for from_id, to_id, sequence in store.run(shard, fetcher(stmt, cut)):
                out.setdefault(int(from_id), {})[int(to_id)] = int(sequence)
    return out


def having_rows(store: AppData, table: MappingTable, from_ids: Iterable[int]) -> set[int]:
    """Those of ``from_ids`` (any shards) with at least one row: one query per shard and 1,000 ids."""
    out: set[int] = set()
    for shard, database, part in _by_shard_parts(store, table, from_ids):
        stmt = sql("map_having_rows", database=database, table=table.name, ids=len(part))
        out.update(int(from_id) for (from_id,) in store.run(shard, fetcher(stmt, part)))
    return out


NEWEST_PARTS = 200  # from_ids per UNION ALL statement: 400 arguments


def newest_of_many(store: AppData, table: MappingTable, from_ids: Iterable[int], n: int) -> dict[int, list[Edge]]:
    """The ``n`` newest rows of each of ``from_ids`` (any shards), newest
    first; ids without rows are left out. Each id's read stops at ``n``
    rows, so an id with millions costs what one with ``n`` does: one
    statement per shard and 200 ids."""
    if type(n) is not int or not 1 <= n <= MAX_PAGE:
        raise ValueError(f"row count {n!r} must be an int in 1..{MAX_PAGE}")
    by_shard: dict[int, list[int]] = defaultdict(list)
    for from_id in dict.fromkeys(from_ids):
        by_shard[_check(table, from_id)].append(from_id)
    out: dict[int, list[Edge]] = {}
    for shard, ids in by_shard.items():
        part_stmt = sql("map_newest_part", database=store.locate(shard).database, table=table.name)
        for start in range(0, len(ids), NEWEST_PARTS):
            part = ids[start : start + NEWEST_PARTS]
            stmt = " UNION ALL ".join([part_stmt] * len(part))
            args = [value for from_id in part for value in (from_id, n)]
            for from_id, to_id, sequence in store.run(shard, fetcher(stmt, args)):
                out.setdefault(int(from_id), []).append(Edge(int(to_id), int(sequence)))
    for edges in out.values():  # a UNION ALL keeps no order across its parts: each id's own, newest first
        edges.sort(key=lambda e: (e.sequence, e.to_id), reverse=True)
    return out


def digests_from_many(store: AppData, table: MappingTable, from_ids: Iterable[int]) -> dict[int, Digest]:
    """Each from_id's digest of its rows now: equal to the one a
    ``rows_from_many`` filled in when those rows are still the ones it
    read (ids without rows are left out of both)."""
    out: dict[int, Digest] = {}
    for shard, database, part in _by_shard_parts(store, table, from_ids):
        stmt = packed(sql("map_digests_from_many", database=database, table=table.name, ids=len(part)))
        for from_id, found, text in store.run(shard, fetcher(stmt, part)):
            out[int(from_id)] = int(found), text
    return out


def count(store: AppData, table: MappingTable, from_id: int) -> int:
    shard = _check(table, from_id)
    stmt = sql("map_count", database=store.locate(shard).database, table=table.name)
    rows = store.run(shard, lambda c, _db: _fetch(c, stmt, [from_id]))
    return int(rows[0][0])


def page(
    store: AppData, table: MappingTable, from_id: int, *, limit: int, cursor: Cursor | str | None = None
) -> Page:
    """Up to ``limit`` rows after ``cursor`` (from the newest when None),
    newest first; ``next`` is None when no row follows this page."""
    shard = _check(table, from_id)
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"page limit {limit!r} must be an int in 1..{MAX_PAGE}")
    if isinstance(cursor, str):
        cursor = Cursor.decode(cursor)
    database = store.locate(shard).database
    args: list[Any]
    name = "map_first_page" if cursor is None else "map_next_page"
    if cursor is None:
        args = [from_id, limit + 1]
    else:
        args = [from_id, cursor.sequence, cursor.sequence, cursor.to_id, limit + 1]
    # Packed: one row back, parsed in one call, where a page of 1,000 rows
    # read one by one costs the client three times the CPU.
    stmt = packed(sql(f"{name}_packed", database=database, table=table.name))
    ((found, text),) = store.run(shard, fetcher(stmt, args))
    rows = packed_list(text, int(found))
    if rows is None:  # past max_allowed_packet: row by row
        stmt = sql(name, database=database, table=table.name)
        rows = [(int(to_id), int(sequence)) for to_id, sequence in store.run(shard, fetcher(stmt, args))]
    edges = [Edge(to_id, sequence) for to_id, sequence in rows[:limit]]
    more = len(rows) > limit
    return Page(edges, Cursor(edges[-1].sequence, edges[-1].to_id) if more else None)


def recent(store: AppData, table: MappingTable, from_id: int, n: int) -> list[Edge]:
    """The ``n`` newest rows (highest sequence first)."""
    return page(store, table, from_id, limit=n).edges


def up_to(store: AppData, table: MappingTable, from_id: int, sequence: int, n: int) -> list[Edge]:
    """The ``n`` newest rows whose sequence is at most ``sequence``, newest first."""
    _check_sequence(sequence)
    return page(store, table, from_id, limit=n, cursor=Cursor(sequence, TO_ID_MAX)).edges


def newer(store: AppData, table: MappingTable, from_id: int, than: Cursor, n: int) -> list[Edge]:
    """The ``n`` rows just newer than ``than`` (a row's sequence and to_id),
    oldest first."""
    shard = _check(table, from_id)
    if type(n) is not int or not 1 <= n <= MAX_PAGE:
        raise ValueError(f"row count {n!r} must be an int in 1..{MAX_PAGE}")
    stmt = sql("map_newer", database=store.locate(shard).database, table=table.name)
    args = [from_id, than.sequence, than.sequence, than.to_id, n]
    return [Edge(int(to_id), int(seq)) for to_id, seq in store.run(shard, lambda c, _db: _fetch(c, stmt, args))]


def walk(store: AppData, table: MappingTable, from_id: int, *, page_size: int = 1000) -> Iterable[Edge]:
    """Every row, newest first, page by page (for tools and repairs; tasks
    chain pages through their jobs instead)."""
    cursor: Cursor | None = None
    while True:
        p = page(store, table, from_id, limit=page_size, cursor=cursor)
        yield from p.edges
        if p.next is None:
            return
        cursor = p.next


def _fetch(cursor: DbCursor, stmt: str, args: Sequence[Any]) -> tuple[tuple[Any, ...], ...]:
    cursor.execute(stmt, args)
    return cursor.fetchall()


def fetcher(stmt: str, args: Sequence[Any]) -> Callable[[DbCursor, str], tuple[tuple[Any, ...], ...]]:
    def run(cursor: DbCursor, _database: str) -> tuple[tuple[Any, ...], ...]:
        return _fetch(cursor, stmt, args)

    return run

