"""Batched writes and deletes, each cell at a timestamp of its own, through
the cluster's Thrift2 server (``putMultiple``, ``deleteMultiple``).

Thrift1 gives every cell of a call one timestamp; Thrift2 takes one per cell,
so a batch can carry any mix of versions. ``put_cells`` and ``delete_cells``
keep the one-timestamp form on top of the per-cell functions.

A write of many cells goes out in several runs of calls at once, up to
one per connection of the pool (``Thrift2Pool.call_encoded``), as a raw writer with
a thread per connection would send them; the function returns once all
have ended. ``put_tables`` sends several tables' cells in one such go.

Puts and deletes never share a call. Within one call HBase does not follow
the caller's order (Thrift1's ``mutateRows`` applied a call's puts before its
deletes, so a put and a delete of one cell in one call always ended deleted);
Thrift2 has a method for each, and its ``mutateRow`` that mixes them in one
row is not used. Each call does one thing, in the order the calls are made.

A delete marker masks the versions it covers until a major compaction purges
it, including puts of those versions that arrive later. This is what makes
out-of-order follow/unfollow safe: an unfollow at t2 beats the follow's puts
at t1 < t2 whatever order the workers run them in. The three kinds:

- ``"version"``: exactly the version at the timestamp, of one column
  (DELETE_COLUMN);
- ``"upto"``: every version <= the timestamp, of one column (DELETE_COLUMNS);
- ``"family_version"``: the version at exactly the timestamp of every column
  of a family (DELETE_FAMILY_VERSION); its column is ``b"family"`` or
  ``b"family:"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple, get_args

from tasks.hbase import encode
from tasks.hbase.cells import check_column, check_family, check_row, check_timestamp, check_value
from tasks.hbase.errors import HBaseRequestFailed
from tasks.hbase.idl import THRIFT2
from tasks.hbase.pool import ClusterPool

DEFAULT_BATCH_SIZE = 1000  # cells per putMultiple / deleteMultiple call

DeleteKind = Literal["version", "upto", "family_version"]
DELETE_KINDS: tuple[DeleteKind, ...] = get_args(DeleteKind)
_DELETE_TYPES = {
    "version": THRIFT2.TDeleteType.DELETE_COLUMN,
    "upto": THRIFT2.TDeleteType.DELETE_COLUMNS,
    "family_version": THRIFT2.TDeleteType.DELETE_FAMILY_VERSION,
}


class VersionPut(NamedTuple):
    """One cell: ``column`` is ``b"family:qualifier"``, ``timestamp`` in ms."""

    row: bytes
    column: bytes
    value: bytes
    timestamp: int


class VersionDelete(NamedTuple):
    """One delete marker (see the module docstring for the kinds)."""

    row: bytes
    column: bytes
    timestamp: int
    kind: DeleteKind


def _split(column: bytes) -> tuple[bytes, bytes]:
    family, _, qualifier = check_column(column).partition(b":")
    return family, qualifier


def _rows_in_calls(cells: Mapping[bytes, int], batch_size: int) -> list[list[bytes]]:
    """Rows (with their number of cells) in key order (the region server
    inserts a sorted batch into its memstore with better locality, and
    splits it by region in one pass), in calls of about ``batch_size``
    cells, whole rows."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    calls: list[list[bytes]] = []
    chunk: list[bytes] = []
    size = 0
    for row in sorted(cells):
        chunk.append(row)
        size += cells[row]
        if size >= batch_size:
            calls.append(chunk)
            chunk, size = [], 0
    if chunk:
        calls.append(chunk)
    return calls


def put_versions(
    pool: ClusterPool,
    table: str,
    cells: Iterable[tuple[bytes, bytes, bytes, int]],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Write ``(row, b"family:qualifier", value, timestamp)`` cells, each at
    its own timestamp: one ``TPut`` per row, in ``putMultiple`` calls of about
    ``batch_size`` cells, sent over up to the pool's size of connections at
    once. Returns the number of cells written."""
    return put_tables(pool, {table: cells}, batch_size=batch_size)


def put_tables(
    pool: ClusterPool,
    tables: Mapping[str, Iterable[tuple[bytes, bytes, bytes, int]]],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """``put_versions`` of several tables' cells, whose calls all go out
    together (``Thrift2Pool.call_encoded``): it returns once every cell is
    written, so a caller that needs some cells in before others (an index's
    member records before their tokens) makes two calls."""
    bodies: list[bytes] = []
    count = 0
    for table, cells in tables.items():
        written, encoded = _put_bodies(pool, table, cells, batch_size)
        count += written
        bodies += encoded
    if bodies:
        pool.thrift2.call_encoded(f"put cells into {', '.join(tables)}", "putMultiple", bodies)
    return count


def _put_bodies(pool: ClusterPool, table: str, cells: Iterable[tuple[bytes, bytes, bytes, int]],
                batch_size: int) -> tuple[int, list[bytes]]:
    """The cells and the encoded ``putMultiple`` calls that write them.

    The calls are encoded here from the values (``tasks.hbase.encode``), not
    built as structs. A fan-out puts one cell into a thousand rows: equal
    cells are checked and encoded once."""
    shared: dict[tuple[bytes, bytes, int], bytes] = {}
    heads: dict[bytes, bytes] = {}  # a fan-out's cells: one column, a version per row
    by_row: dict[bytes, list[bytes]] = {}
    count = 0
    for row, column, value, timestamp in cells:
        key = (column, value, check_timestamp(timestamp))  # checked first: True == 1 as a key
        encoded = shared.get(key)
        if encoded is None:
            head = heads.get(column)
            if head is None:
                head = heads[column] = encode.column_head(*_split(column))
            encoded = shared[key] = encode.cell(head, check_value(value), timestamp)
        values = by_row.get(row)
        if values is None:
            values = by_row[check_row(row)] = []
        values.append(encoded)
        count += 1
    if not count:
        return 0, []
    name = pool.table_name(table).encode()
    calls = _rows_in_calls({row: len(values) for row, values in by_row.items()}, batch_size)
    return count, [encode.put_multiple_args(name, [encode.put(row, by_row[row]) for row in rows]) for rows in calls]


def _delete_column(column: bytes, timestamp: int, kind: str) -> Any:
    if kind == "family_version":
        return THRIFT2.TColumn(family=check_family(column), timestamp=timestamp)
    family, qualifier = _split(column)
    return THRIFT2.TColumn(family=family, qualifier=qualifier, timestamp=timestamp)


def delete_versions(
    pool: ClusterPool,
    table: str,
    deletes: Iterable[tuple[bytes, bytes, int, str]],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Write ``(row, column, timestamp, kind)`` delete markers (kinds in the
    module docstring: ``DeleteKind``), in ``deleteMultiple`` calls of about
    ``batch_size`` markers. Returns the number of markers."""
    by_row_kind: dict[tuple[bytes, str], list[Any]] = {}
    count = 0
    for row, column, timestamp, kind in deletes:
        if kind not in _DELETE_TYPES:
            raise ValueError(f"delete kind must be one of {', '.join(DELETE_KINDS)}, got {kind!r}")
        marker = _delete_column(column, check_timestamp(timestamp), kind)
        by_row_kind.setdefault((check_row(row), kind), []).append(marker)
        count += 1
    if not count:
        return 0
    # The server takes one delete type per TDelete: one per row and kind.
    by_row: dict[bytes, list[Any]] = {}
    for (row, kind), columns in by_row_kind.items():
        by_row.setdefault(row, []).append(THRIFT2.TDelete(row=row, columns=columns, deleteType=_DELETE_TYPES[kind]))
    sizes = {row: sum(len(delete.columns) for delete in deletes) for row, deletes in by_row.items()}
    calls = [[delete for row in rows for delete in by_row[row]] for rows in _rows_in_calls(sizes, batch_size)]
    name = pool.table_name(table).encode()
    operation = f"delete versions from {table}"

    def work(client: Any) -> int:
        for batch in calls:
            refused = client.deleteMultiple(name, batch)
            if refused:  # 2.6.1 throws rather than answer refused deletes; fail if one ever does
                raise HBaseRequestFailed(
                    pool.name, str(pool.thrift2.address), operation, f"{len(refused)} deletes not applied"
                )
        return count

    return pool.thrift2.run(operation, work)


def put_cells(
    pool: ClusterPool,
    table: str,
    rows: Mapping[bytes, Mapping[bytes, bytes]],
    *,
    timestamp: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Write ``{row: {b"family:qualifier": value}}`` at ``timestamp``, in
    calls of about ``batch_size`` cells (whole rows). Returns the number of
    cells written."""
    check_timestamp(timestamp)
    cells = [(row, column, value, timestamp) for row, columns in rows.items() for column, value in columns.items()]
    return put_versions(pool, table, cells, batch_size=batch_size)


def delete_cells(
    pool: ClusterPool,
    table: str,
    rows: Mapping[bytes, Iterable[bytes]],
    *,
    timestamp: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Delete the given columns of each row at ``timestamp``: masks every
    version <= timestamp, now and for late writes. Whole-row deletes are not
    offered: an empty column list is an error, not "everything"."""
    check_timestamp(timestamp)
    deletes: list[tuple[bytes, bytes, int, str]] = []
    for row, columns in rows.items():
        listed = [(row, check_column(column), timestamp, "upto") for column in columns]
        if not listed:
            raise ValueError(f"delete_cells: no columns given for row {row!r} (whole-row deletes are not offered)")
        deletes.extend(listed)
    return delete_versions(pool, table, deletes, batch_size=batch_size)
