"""Checks shared by reads and writes: columns and cell timestamps."""

from __future__ import annotations

MAX_TIMESTAMP = 2**63 - 1


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
