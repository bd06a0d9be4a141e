"""Checks shared by reads and writes: rows, columns, values and cell timestamps."""

from __future__ import annotations

MAX_TIMESTAMP = 2**63 - 1
# HBase's own "keep every version" (HConstants.ALL_VERSIONS, Integer.MAX_VALUE).
ALL_VERSIONS = 2**31 - 1


def check_timestamp(timestamp: int) -> int:
    """A cell timestamp: milliseconds, > 0. HBase's own clock would be a
    different one per cluster and per retry; the feed needs the action's."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not 0 < timestamp < MAX_TIMESTAMP:
        raise ValueError(f"cell timestamp must be a positive int (ms), got {timestamp!r}")
    return timestamp


def check_column(column: bytes) -> bytes:
    """A column: b"family:qualifier"."""
    if not isinstance(column, bytes) or b":" not in column or column.startswith(b":"):
        raise ValueError(f"column must be bytes b'family:qualifier', got {column!r}")
    return column


def check_family(column: bytes) -> bytes:
    """A whole family, given as b"family" or b"family:"; returns b"family"."""
    family = column[:-1] if isinstance(column, bytes) and column.endswith(b":") else column
    if not isinstance(family, bytes) or not family or b":" in family:
        raise ValueError(f"family must be bytes b'family' or b'family:', got {column!r}")
    return family


def check_row(row: bytes) -> bytes:
    """A row key: non-empty bytes (HBase refuses an empty one)."""
    if not isinstance(row, bytes) or not row:
        raise ValueError(f"row key must be non-empty bytes, got {row!r}")
    return row


def check_value(value: bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"cell value must be bytes, got {type(value).__name__}")
    return value
