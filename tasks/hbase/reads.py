"""Paged reads of one wide row, server-side with ColumnPaginationFilter.

Columns come back in HBase's order (lexicographic by qualifier), so with the
feed's qualifiers (reverse creation time + pin id) the newest pins first.
Two ways to page: ``offset`` (ColumnPaginationFilter(limit, offset), simple,
but a write between pages shifts them) or ``after`` (the last qualifier of
the previous page, via ColumnRangeFilter: stable under concurrent writes).
"""

from __future__ import annotations

from typing import Any

from tasks.hbase.cells import check_timestamp
from tasks.hbase.pool import ClusterPool


def _quote(value: bytes) -> bytes:
    """A filter-language string literal (quotes are doubled)."""
    return b"'" + value.replace(b"'", b"''") + b"'"


def page_filter(limit: int, offset: int = 0, after: bytes | None = None) -> bytes:
    if not 0 < limit <= 100_000:
        raise ValueError(f"limit must be in 1..100000, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    paging = b"ColumnPaginationFilter(%d, %d)" % (limit, offset)
    if after is None:
        return paging
    # Qualifiers strictly after `after`, no upper bound ('' means none).
    return b"ColumnRangeFilter(" + _quote(after) + b", false, '', false) AND " + paging


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
    scan_filter = page_filter(limit, offset, after)
    prefix = family.encode() + b":"

    def work(connection: Any) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        # One row: a scan from the row to the next possible key (Thrift1's
        # single-row get takes no filter). Sorted: happybase returns dicts.
        for _key, data in connection.table(table).scan(
            row_start=row,
            row_stop=row + b"\x00",
            columns=[family.encode()],
            filter=scan_filter,
            timestamp=before_timestamp,
            limit=1,
            sorted_columns=True,
        ):
            out.extend((column[len(prefix) :], value) for column, value in data.items())
        return out

    return pool.run(f"read {table} row {row[:40]!r}", work)
