"""The verify pass of the contacts index: the cells MySQL says each user's
index should hold, compared with what one cluster holds, and repairs.

A difference is one place (owner, source, contact) whose cells differ in
presence, value or version. The cluster is read before MySQL, so a cell
the truth does not have was written from older truth. Repair deletes each
such cell at exactly its own version, then settles the places
(``tasks.typeahead.writer.settle``): it reads the truth again and writes it
as every job does, so it is right even when the truth changed since the
diff, and a real-time job racing it is too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from tasks.appdata.store import AppData
from tasks.hbase import ClusterPool, delete_versions
from tasks.hbase.reads import scan_range
from tasks.typeahead import truth
from tasks.typeahead.entries import (
    MEMBER_FAMILY,
    SEPARATOR,
    TALL_TABLE,
    TOKEN_FAMILY,
    WIDE_TABLE,
    CorruptCell,
    Entry,
    owner_ranges,
    split_tall_row,
    split_wide_row,
)
from tasks.typeahead.sources import BY_NAME, source_named
from tasks.typeahead.writer import settle

Place = tuple[int, str, str]  # owner, source name, contact key
CellKey = tuple[str, bytes, bytes]  # table, row, column


@dataclass(slots=True)
class PlaceCells:
    cells: dict[CellKey, tuple[bytes, int]] = field(default_factory=dict)  # value, timestamp


@dataclass(frozen=True, slots=True)
class ContactDifference:
    owner: int
    source: str
    key: str
    expected: Entry | None
    unexpected: tuple[tuple[CellKey, int], ...]  # cells to delete, with their timestamps
    problem: str


def _place_of_wide(row: bytes, column: bytes) -> Place:
    owner, source = split_wide_row(row)
    if column.startswith(TOKEN_FAMILY):
        token, sep, key = column[len(TOKEN_FAMILY):].partition(SEPARATOR)
        if not sep or not token or not key:
            raise CorruptCell(f"bad token column {column[:60]!r}")
        return owner, source.name, key.decode()
    if column.startswith(MEMBER_FAMILY):
        return owner, source.name, column[len(MEMBER_FAMILY):].decode()
    raise CorruptCell(f"unknown column {column[:60]!r}")


def read_actual(pool: ClusterPool, owners: Sequence[int]) -> dict[Place, PlaceCells]:
    """Every cell of ``owners``' indexes on one cluster, by place. Cells this
    code cannot place are reported under the pseudo-contact "?" so the
    repair deletes them."""
    wanted = set(owners)
    out: dict[Place, PlaceCells] = defaultdict(PlaceCells)
    for start, stop in owner_ranges(owners):
        for row, columns in scan_range(pool, WIDE_TABLE, start=start, stop=stop, include_timestamp=True):
            for column, (value, ts) in columns.items():
                try:
                    place = _place_of_wide(row, column)
                except (CorruptCell, UnicodeDecodeError):
                    place = (int.from_bytes(row[:8], "big"), "?", "?")
                if place[0] in wanted:
                    out[place].cells[(WIDE_TABLE, row, column)] = (value, int(ts))
        for row, columns in scan_range(pool, TALL_TABLE, start=start, stop=stop, include_timestamp=True):
            try:
                owner, source, _token, key = split_tall_row(row)
                place = (owner, source.name, key)
            except (CorruptCell, UnicodeDecodeError):
                place = (int.from_bytes(row[:8], "big"), "?", "?")
            if place[0] in wanted:
                for column, (value, ts) in columns.items():
                    out[place].cells[(TALL_TABLE, row, column)] = (value, int(ts))
    return dict(out)


def _expected_cells(entry: Entry) -> dict[CellKey, bytes]:
    return {
        (table, row, column): value
        for table, rows in entry.cells().items()
        for row, columns in rows.items()
        for column, value in columns.items()
    }


def diff(store: AppData, pool: ClusterPool, owners: Sequence[int]) -> list[ContactDifference]:
    if not owners:
        return []
    # The cluster first, then MySQL: a cell seen was written before the truth
    # it is compared with, so one that truth does not have is stale, not new.
    actual = read_actual(pool, owners)
    by_owner = truth.entries_of_owners(store, owners)
    expected = {(e.owner, e.source.name, e.key): e for entries in by_owner.values() for e in entries}
    out = []
    for place in sorted(set(expected) | set(actual)):
        entry = expected.get(place)
        want = _expected_cells(entry) if entry else {}
        have = actual[place].cells if place in actual else {}
        missing = [k for k in want if k not in have]
        version = entry.version if entry else 0
        wrong = [k for k in want if k in have and have[k] != (want[k], version)]
        # A cell at another version than the entry's is stale wherever it is.
        extra = tuple((k, have[k][1]) for k in sorted(have) if k not in want or have[k][1] != version)
        if missing or wrong or extra:
            problem = f"missing {len(missing)} cells, {len(wrong)} stale, {len(extra)} unexpected"
            out.append(ContactDifference(place[0], place[1], place[2], entry, extra, problem))
    return out


def repair(store: AppData, pool: ClusterPool, diffs: Sequence[ContactDifference]) -> int:
    """Deletes each unexpected cell at exactly its own version (a stale
    write: versions only grow with the truth, so nothing newer is hidden),
    then settles the places of ``diffs``; the cells changed."""
    places = [(d.owner, source_named(d.source), d.key) for d in diffs if d.source in BY_NAME]
    strays: dict[str, list[tuple[bytes, bytes, int, str]]] = defaultdict(list)
    for d in diffs:
        for (table, row, column), ts in d.unexpected:
            strays[table].append((row, column, ts, "version"))
    changed = sum(delete_versions(pool, table, cells) for table, cells in sorted(strays.items()))
    return changed + (settle(store, pool, places) if places else 0)
