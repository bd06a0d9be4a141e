"""Writes of index entries to one cluster.

* ``put_entries``: blind puts at each entry's version (a backfill: many
  users at once, nothing read first).
* ``apply``: real-time changes. Reads the member records of the places it
  touches first (one multi-get per table), so a changed name's old token
  columns are deleted though the job never knew the old name, and an
  absent contact loses every token it had.

Old tokens are deleted at the new entry's version: that masks every older
write of them, and a later name that brings a token back has a newer
version. Puts and deletes never share a call (within one Thrift call
HBase applies puts first; see tasks/hbase/writes.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from tasks.hbase import ClusterPool, delete_cells, put_cells
from tasks.hbase.reads import get_rows
from tasks.typeahead.entries import (
    TALL_MEMBER,
    TALL_TABLE,
    WIDE_TABLE,
    Cells,
    Entry,
    member_column,
    member_row,
    member_tokens,
    merge,
    row_prefix,
    token_columns,
)
from tasks.typeahead.sources import Schema, Source

Place = tuple[int, Source, str]  # owner, source, contact key


@dataclass(frozen=True, slots=True)
class Removal:
    """A contact to take out of one owner's source, as of ``at`` (ms)."""

    owner: int
    source: Source
    key: str
    at: int
    tokens: tuple[str, ...] = ()  # known tokens besides the member record's


def _calls(by_version: dict[int, Cells]) -> list[tuple[int, str, dict[bytes, dict[bytes, bytes]]]]:
    return [(version, table, rows) for version, tables in sorted(by_version.items()) for table, rows in tables.items()]


def in_parallel(pool: ClusterPool, calls: Sequence[Callable[[], int]]) -> int:
    """Runs independent write calls on up to ``pool.size`` connections at
    once; their sum. Thrift1 takes one timestamp per call, and a page of
    entries has thousands of distinct versions (follow times are
    milliseconds), so a backfill page is thousands of small calls: their
    round trips overlap instead of adding up. Each call is idempotent (cells
    at a fixed timestamp), so the first failure is raised and the job's
    retry writes everything again."""
    if len(calls) <= 1 or pool.size <= 1:
        return sum(call() for call in calls)
    with ThreadPoolExecutor(max_workers=min(pool.size, len(calls)), thread_name_prefix="hbase-write") as executor:
        return sum(executor.map(lambda call: call(), calls))


def _put(pool: ClusterPool, by_version: dict[int, Cells]) -> int:
    return in_parallel(pool, [
        partial(put_cells, pool, table, rows, timestamp=version) for version, table, rows in _calls(by_version)
    ])


def _delete(pool: ClusterPool, by_version: dict[int, Cells]) -> int:
    calls: list[Callable[[], int]] = []
    for version, table, rows in _calls(by_version):
        named = {row: list(columns) for row, columns in rows.items() if columns}
        if named:
            calls.append(partial(delete_cells, pool, table, named, timestamp=version))
    return in_parallel(pool, calls)


def put_entries(pool: ClusterPool, entries: Iterable[Entry]) -> int:
    """Every cell of ``entries`` at its entry's version; the cells written."""
    by_version: dict[int, Cells] = defaultdict(dict)
    for entry in entries:
        merge(by_version[entry.version], entry.cells())
    return _put(pool, by_version)


def read_members(pool: ClusterPool, places: Iterable[Place]) -> dict[Place, tuple[str, ...]]:
    """The tokens each place's member record lists (places without one are left out)."""
    wide: dict[bytes, list[Place]] = defaultdict(list)
    tall: dict[bytes, Place] = {}
    for place in dict.fromkeys(places):
        owner, source, key = place
        if source.schema is Schema.WIDE:
            wide[row_prefix(owner, source)].append(place)
        else:
            tall[member_row(owner, source, key)] = place
    found: dict[Place, tuple[str, ...]] = {}
    if wide:
        columns = sorted({member_column(key) for places_ in wide.values() for _o, _s, key in places_})
        rows = get_rows(pool, WIDE_TABLE, sorted(wide), columns=columns)
        for row, places_ in wide.items():
            for place in places_:
                value = rows.get(row, {}).get(member_column(place[2]))
                if value is not None:
                    found[place] = member_tokens(value)
    if tall:
        rows = get_rows(pool, TALL_TABLE, sorted(tall), columns=[TALL_MEMBER])
        for row, place in tall.items():
            value = rows.get(row, {}).get(TALL_MEMBER)
            if value is not None:
                found[place] = member_tokens(value)
    return found


def _member_cells(owner: int, source: Source, key: str) -> Cells:
    if source.schema is Schema.WIDE:
        return {WIDE_TABLE: {row_prefix(owner, source): {member_column(key): b""}}}
    return {TALL_TABLE: {member_row(owner, source, key): {TALL_MEMBER: b""}}}


def apply(pool: ClusterPool, sets: Sequence[Entry], removals: Sequence[Removal] = ()) -> int:
    """Puts ``sets`` and takes out ``removals`` on one cluster, deleting the
    token columns the member records say are no longer the contact's. The
    cells written and deleted."""
    members = read_members(
        pool, [(e.owner, e.source, e.key) for e in sets] + [(r.owner, r.source, r.key) for r in removals]
    )
    puts: dict[int, Cells] = defaultdict(dict)
    deletes: dict[int, Cells] = defaultdict(dict)
    for entry in sets:
        merge(puts[entry.version], entry.cells())
        stale = tuple(sorted(set(members.get((entry.owner, entry.source, entry.key), ())) - set(entry.tokens)))
        if stale:
            merge(deletes[entry.version], token_columns(entry.owner, entry.source, entry.key, stale))
    for removal in removals:
        place = (removal.owner, removal.source, removal.key)
        tokens = tuple(sorted(set(members.get(place, ())) | set(removal.tokens)))
        merge(deletes[removal.at], token_columns(removal.owner, removal.source, removal.key, tokens))
        merge(deletes[removal.at], _member_cells(*place))
    return _put(pool, puts) + _delete(pool, deletes)
