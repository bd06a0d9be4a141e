"""The verify pass of the contacts index: the cells MySQL says each user's
index should hold, compared with what one cluster holds, and repairs.

A difference is one place (owner, source, contact) whose cells differ in
presence or value (timestamps are not compared: a repair may have had to
write at a newer one). Repair deletes each unexpected cell at its own
timestamp (so a newer real-time write stays) and puts the expected cells at
the entry's version; a difference the previous round found too is put at
the current time instead, since a delete marker newer than the version
(invisible to reads) may have masked the first try.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import partial

from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPool, delete_cells, put_cells
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
    owner_key,
    split_tall_row,
    split_wide_row,
)
from tasks.typeahead.writer import in_parallel

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
    start, stop = owner_key(min(owners)), owner_key(max(owners) + 1)
    out: dict[Place, PlaceCells] = defaultdict(PlaceCells)
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
    by_owner = truth.entries_of_owners(store, owners)
    expected = {(e.owner, e.source.name, e.key): e for entries in by_owner.values() for e in entries}
    actual = read_actual(pool, owners)
    out = []
    for place in sorted(set(expected) | set(actual)):
        entry = expected.get(place)
        want = _expected_cells(entry) if entry else {}
        have = actual[place].cells if place in actual else {}
        missing = [k for k in want if k not in have]
        wrong = [k for k in want if k in have and have[k][0] != want[k]]
        extra = tuple((k, have[k][1]) for k in sorted(have) if k not in want)
        if missing or wrong or extra:
            problem = f"missing {len(missing)} cells, {len(wrong)} stale, {len(extra)} unexpected"
            out.append(ContactDifference(place[0], place[1], place[2], entry, extra, problem))
    return out


def repair(
    pool: ClusterPool, diffs: Sequence[ContactDifference], seen_before: Collection[ContactDifference] = ()
) -> int:
    """Deletes the unexpected cells (each at its own timestamp) and puts the
    expected ones: at the entry's version, or now for a difference that a
    previous round found too. The cells changed."""
    changed = 0
    deletes: dict[tuple[str, int], dict[bytes, list[bytes]]] = defaultdict(lambda: defaultdict(list))
    for d in diffs:
        for (table, row, column), ts in d.unexpected:
            deletes[(table, ts)][row].append(column)
    changed += in_parallel(pool, [
        partial(delete_cells, pool, table, columns, timestamp=ts) for (table, ts), columns in sorted(deletes.items())
    ])
    now = now_ms()
    puts: dict[tuple[str, int], dict[bytes, dict[bytes, bytes]]] = defaultdict(lambda: defaultdict(dict))
    for d in diffs:
        if d.expected is None:
            continue
        at = max(d.expected.version, now) if d in seen_before else d.expected.version
        for table, rows in d.expected.cells().items():
            for row, cells in rows.items():
                puts[(table, at)][row].update(cells)
    return changed + in_parallel(pool, [
        partial(put_cells, pool, table, planned, timestamp=ts) for (table, ts), planned in sorted(puts.items())
    ])
