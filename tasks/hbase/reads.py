"""Reads: paged reads of one wide row (a Get paged by the server) and range
scans, each in one Thrift2 call; ``get_rows`` (the newest cells of some
rows), ``get_versions`` (every version of some rows) and ``scan_versions``
(of a range) read through Thrift2; the sweep's and the tools' scans go through happybase (Thrift1),
where a scan of many rows streams in batches.

Columns come back in HBase's order (lexicographic by qualifier), so with the
feed's qualifiers (reverse creation time + pin id) the newest pins first.
Two ways to page: ``offset`` (simple, but a write between pages shifts
them) or ``after`` (the last qualifier of the previous page, via
ColumnRangeFilter: stable under concurrent writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.hbase.cells import ALL_VERSIONS, check_row, check_timestamp
from tasks.hbase.idl import THRIFT2
from tasks.hbase.pool import ClusterPool


def quote_literal(value: bytes) -> bytes:
    """A filter-language string literal (quotes are doubled)."""
    return b"'" + value.replace(b"'", b"''") + b"'"


def check_page(limit: int, offset: int = 0) -> None:
    if not 0 < limit <= 100_000:
        raise ValueError(f"limit must be in 1..100000, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")


def page_filter(limit: int, offset: int = 0) -> bytes:
    """``limit`` columns from ``offset`` on, of each row (a filter-language string)."""
    check_page(limit, offset)
    return b"ColumnPaginationFilter(%d, %d)" % (limit, offset)


def after_filter(after: bytes) -> bytes:
    """Qualifiers strictly after ``after``, no upper bound ('' means none)."""
    return b"ColumnRangeFilter(" + quote_literal(after) + b", false, '', false)"


def _scan(pool: ClusterPool, table: str, scan: Any, limit: int, operation: str) -> list[Any]:
    """Up to ``limit`` rows of ``scan`` as Thrift2 ``TResult``s, in one call
    (``getScannerResults``: the server opens, reads and closes the scanner),
    where a Thrift1 scan takes three or four (open, fetch until short, close)."""
    scan.caching, scan.limit, scan.readType = limit, limit, THRIFT2.TReadType.PREAD
    name = pool.table_name(table).encode()
    return pool.thrift2.run(operation, lambda client: client.getScannerResults(name, scan, limit))


def _get_page(
    pool: ClusterPool, table: str, row: bytes, family: str, limit: int, offset: int, after: bytes | None, *,
    timestamp: int | None = None, include_timestamp: bool = False,
) -> list[tuple[bytes, Any]]:
    """A page of one row's ``family``, in column order, qualifiers without
    the family: one Get, paged by the store's own limit and offset
    (``storeLimit``/``storeOffset``, counted after deletes and the filter),
    with a filter to parse only for a page after a cursor. Measured against
    a one-row scan with ColumnPaginationFilter: half the servers' CPU a
    page. ``timestamp``: versions older than it only."""
    check_page(limit, offset)
    get = THRIFT2.TGet(
        row=check_row(row), columns=[THRIFT2.TColumn(family=family.encode())], storeLimit=limit,
        storeOffset=offset or None, filterString=None if after is None else after_filter(after),
        timeRange=None if timestamp is None else THRIFT2.TTimeRange(minStamp=0, maxStamp=timestamp),
    )
    name = pool.table_name(table).encode()
    what = "with timestamps" if include_timestamp else ""
    result = pool.thrift2.run(f"read {table} row {what}".rstrip(), lambda client: client.get(name, get))
    if include_timestamp:
        return [(c.qualifier, (c.value, c.timestamp)) for c in result.columnValues]
    return [(c.qualifier, c.value) for c in result.columnValues]


def read_cells(
    pool: ClusterPool,
    table: str,
    row: bytes,
    *,
    family: str,
    limit: int,
    offset: int = 0,
    after: bytes | None = None,
) -> list[tuple[bytes, bytes, int]]:
    """``read_columns`` with each cell's timestamp: ``(qualifier, value,
    timestamp)``. Trims need it: a delete at the newest excess cell's
    timestamp masks every excess cell, and nothing written later."""
    cells = _get_page(pool, table, row, family, limit, offset, after, include_timestamp=True)
    return [(qualifier, value, int(ts)) for qualifier, (value, ts) in cells]


def rows_longer_than(
    pool: ClusterPool,
    table: str,
    *,
    family: str,
    count: int,
    limit: int,
    start: bytes = b"",
) -> list[bytes]:
    """Up to ``limit`` row keys from ``start`` (inclusive) on whose ``family``
    has more than ``count`` columns, in key order. The filter
    ``ColumnPaginationFilter(1, count)`` leaves a row a cell only if it has a
    column at offset ``count``, and rows left empty are not returned, so
    short rows never cross the wire (the region server still reads them)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    scan_filter = page_filter(1, count)

    def work(connection: Any) -> list[bytes]:
        return [
            key
            for key, _data in connection.table(table).scan(
                row_start=start or None,
                columns=[family.encode()],
                filter=scan_filter,
                limit=limit,
                batch_size=min(limit, 1000),
            )
        ]

    return pool.run(f"scan {table} for long rows", work)


def read_columns(
    pool: ClusterPool,
    table: str,
    row: bytes,
    *,
    family: str,
    limit: int,
    offset: int = 0,
    after: bytes | None = None,
    before_timestamp: int | None = None,
) -> list[tuple[bytes, bytes]]:
    """One page of ``(qualifier, value)`` from ``row``'s ``family``, at most
    ``limit`` long; shorter only at the end of the row. ``before_timestamp``
    reads as of then (exclusive: versions with ts < it)."""
    if before_timestamp is not None:
        check_timestamp(before_timestamp)
    return _get_page(pool, table, row, family, limit, offset, after, timestamp=before_timestamp)


def prefix_filter(prefix: bytes) -> bytes:
    """Columns whose qualifier starts with ``prefix`` (a filter-language string)."""
    return b"ColumnPrefixFilter(" + quote_literal(prefix) + b")"


def get_rows(
    pool: ClusterPool, table: str, rows: list[bytes], *, columns: list[bytes] | None = None,
) -> dict[bytes, dict[bytes, bytes]]:
    """``{row: {b"family:qualifier": value}}``, the newest version of each
    cell of the given rows, through Thrift2 ``getMultiple`` (one call for up
    to 1,000 rows, so a lookup's ``within`` bounds it); rows with none of
    the columns are left out."""
    return {row: {column: versions[0][1] for column, versions in cells.items()}
            for row, cells in get_versions(pool, table, rows, columns=columns, max_versions=1).items()}


def scan_range(
    pool: ClusterPool,
    table: str,
    *,
    start: bytes,
    stop: bytes,
    columns: list[bytes] | None = None,
    scan_filter: bytes | None = None,
    limit: int | None = None,
    include_timestamp: bool = False,
    batch_size: int = 1000,
) -> list[tuple[bytes, dict[bytes, Any]]]:
    """Rows with keys in [start, stop), in key order; values are
    ``(value, timestamp)`` pairs with ``include_timestamp``."""

    def work(connection: Any) -> list[tuple[bytes, dict[bytes, Any]]]:
        return list(
            connection.table(table).scan(
                row_start=start, row_stop=stop, columns=columns, filter=scan_filter, limit=limit,
                include_timestamp=include_timestamp, batch_size=min(batch_size, limit or batch_size),
            )
        )

    return pool.run(f"scan {table}", work)


def scan_rows(
    pool: ClusterPool,
    table: str,
    *,
    start: bytes,
    stop: bytes,
    limit: int,
    columns: list[bytes] | None = None,
    scan_filter: bytes | None = None,
) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Up to ``limit`` rows with keys in [start, stop), in key order, the
    newest version of each cell, in one Thrift2 call. ``columns`` are
    families or ``b"family:qualifier"``; ``scan_filter`` is HBase's filter
    language, as for ``scan_range``."""
    if not 0 < limit <= 100_000:
        raise ValueError(f"limit must be in 1..100000, got {limit}")
    scan = THRIFT2.TScan(startRow=start, stopRow=stop, filterString=scan_filter,
                         columns=[_get_column(c) for c in columns] if columns else None)
    return [(result.row, {c.family + b":" + c.qualifier: c.value for c in result.columnValues})
            for result in _scan(pool, table, scan, limit, f"scan {table}")]


def _get_column(column: bytes) -> Any:
    """b"family" (the whole family) or b"family:qualifier"."""
    family, colon, qualifier = column.partition(b":") if isinstance(column, bytes) else (b"", b"", b"")
    if not family:
        raise ValueError(f"column must be bytes b'family' or b'family:qualifier', got {column!r}")
    return THRIFT2.TColumn(family=family, qualifier=qualifier) if colon else THRIFT2.TColumn(family=family)


def get_versions(
    pool: ClusterPool,
    table: str,
    rows: list[bytes],
    *,
    columns: list[bytes] | Mapping[bytes, list[bytes]] | None = None,
    max_versions: int = ALL_VERSIONS,
    batch_size: int = 1000,
) -> dict[bytes, dict[bytes, list[tuple[int, bytes]]]]:
    """``{row: {b"family:qualifier": [(timestamp, value), ...]}}``, newest
    first, up to ``max_versions`` per column (those the family keeps and no
    delete masks), through Thrift2 ``getMultiple``. ``columns`` are whole
    families (``b"m"``) or ``b"family:qualifier"``: one list for every row,
    or each row's own (a mapping; a row it lists no column for reads
    every family); None means every family. Rows with no cells are left out.

    A call closes once it names ``batch_size`` rows and columns (a row
    counts as many as the columns it lists): the server holds a whole
    request in memory, so many rows each listing many columns are split."""
    if not 0 < max_versions <= ALL_VERSIONS:
        raise ValueError(f"max_versions must be in 1..{ALL_VERSIONS}, got {max_versions}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    shared = None if columns is None or isinstance(columns, Mapping) else [_get_column(c) for c in columns]
    calls: list[list[Any]] = []
    weight = batch_size
    for row in rows:
        wanted = [_get_column(c) for c in columns.get(row, ())] if isinstance(columns, Mapping) else shared
        get = THRIFT2.TGet(row=check_row(row), columns=wanted or None, maxVersions=max_versions)
        if weight >= batch_size:
            calls.append([])
            weight = 0
        calls[-1].append(get)
        weight += max(1, len(wanted or ()))
    if not calls:
        return {}
    name = pool.table_name(table).encode()

    def work(client: Any) -> dict[bytes, dict[bytes, list[tuple[int, bytes]]]]:
        out: dict[bytes, dict[bytes, list[tuple[int, bytes]]]] = {}
        for chunk in calls:
            for get, result in zip(chunk, client.getMultiple(name, chunk), strict=True):
                _add_versions(out, get.row, result.columnValues)
        return out

    return pool.thrift2.run(f"get versions of rows of {table}", work)


def _add_versions(out: dict[bytes, dict[bytes, list[tuple[int, bytes]]]], row: bytes, cells: list[Any]) -> None:
    # HBase's order: by column, and within a column newest first.
    if not cells:
        return
    columns = out.setdefault(row, {})
    for cell in cells:
        columns.setdefault(cell.family + b":" + cell.qualifier, []).append((cell.timestamp, cell.value))


def scan_versions(
    pool: ClusterPool,
    table: str,
    *,
    start: bytes,
    stop: bytes,
    columns: list[bytes],
    max_versions: int = ALL_VERSIONS,
    page: int = 2000,
) -> dict[bytes, dict[bytes, list[tuple[int, bytes]]]]:
    """What ``get_versions`` gives, for every row in [start, stop) holding
    one of ``columns`` (families or ``b"family:qualifier"``): a Thrift2
    scan in calls of ``page`` rows, each starting after the last row of the
    one before."""
    if not 0 < max_versions <= ALL_VERSIONS:
        raise ValueError(f"max_versions must be in 1..{ALL_VERSIONS}, got {max_versions}")
    if not 0 < page <= 100_000:
        raise ValueError(f"page must be in 1..100000, got {page}")
    wanted = [_get_column(c) for c in columns]
    out: dict[bytes, dict[bytes, list[tuple[int, bytes]]]] = {}
    while True:
        scan = THRIFT2.TScan(startRow=start, stopRow=stop, columns=wanted, maxVersions=max_versions)
        results = _scan(pool, table, scan, page, f"scan versions of {table}")
        for result in results:
            _add_versions(out, result.row, result.columnValues)
        if len(results) < page:
            return out
        start = results[-1].row + b"\x00"
