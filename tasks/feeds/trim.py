"""Capping a feed row: delete the columns past the newest ``cap``.

Only the excess is read: ``ColumnPaginationFilter(limit, offset=cap)``
through ``tasks.hbase.reads``, then pages after the last excess column.
Each page's columns are deleted up to the newest version among its cells:
a delete at T masks every version <= T of its column, so it masks all of
them, and (each version being the time of a follow that had happened by
then) it is not later than any follow still to come. A follow after the
trim that brings one of these pins back has a later version and shows it
again, as it should.

The cap races fan-out harmlessly: a pin put after the read shifts the row
by one; the next trim takes it. A trim only ever removes pins that were
past the cap when it read the row; what it removed stays removed (a feed
that an unfollow shrinks below its cap does not get older pins back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks import bodies
from tasks.feeds.cells import FAMILY, TABLE, parse_row_key, row_key
from tasks.feeds.writes import CLUSTERS
from tasks.hbase import ClusterPair, delete_versions
from tasks.hbase.reads import read_cells, rows_longer_than

DEFAULT_CAP = 1000
DEFAULT_TRIM_PAGE = 1000  # excess columns read, and deleted, per call
DEFAULT_SWEEP_ROWS = 100
MAX_CAP = 1_000_000
_FAMILY = FAMILY.encode()
Delete = tuple[bytes, bytes, int, str]  # row, column, timestamp, kind (tasks.hbase.delete_versions)


class InvalidTrimJob(ValueError):
    pass


def _check_cap(cap: Any, what: str) -> None:
    if type(cap) is not int or not 1 <= cap <= MAX_CAP:
        raise InvalidTrimJob(f"{what}: cap must be an int in 1..{MAX_CAP}, got {cap!r}")


@dataclass(frozen=True, slots=True)
class TrimJob:
    """Cap one user's row on one cluster (each cluster is trimmed by its
    own content; a job per cluster)."""

    user_id: int
    cluster: str
    cap: int

    def __post_init__(self) -> None:
        try:
            row_key(self.user_id)
        except ValueError as exc:
            raise InvalidTrimJob(f"trim job: {exc}") from None
        if self.cluster not in CLUSTERS:
            raise InvalidTrimJob(f"trim job: cluster must be primary or standby, got {self.cluster!r}")
        _check_cap(self.cap, "trim job")

    def to_json(self) -> str:
        return bodies.dump({"user_id": self.user_id, "cluster": self.cluster, "cap": self.cap})

    @classmethod
    def from_json(cls, text: str | bytes) -> TrimJob:
        return cls(**bodies.load(text, "trim job", ("user_id", "cluster", "cap"), (), InvalidTrimJob))


@dataclass(frozen=True, slots=True)
class SweepJob:
    """One page of a sweep of one cluster's feeds from ``cursor``. A
    ``cluster`` of None (the periodic start, body ``{}``) starts a sweep of
    each cluster; a ``cap`` of None is the configured one."""

    cluster: str | None = None
    cursor: str | None = None
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.cluster is not None and self.cluster not in CLUSTERS:
            raise InvalidTrimJob(f"sweep job: cluster must be primary, standby or null, got {self.cluster!r}")
        if self.cursor is not None:
            if self.cluster is None:
                raise InvalidTrimJob("sweep job: a cursor needs a cluster")
            try:
                bytes.fromhex(self.cursor)
            except (TypeError, ValueError):
                raise InvalidTrimJob(f"sweep job: cursor must be hex text, got {self.cursor!r:.80}") from None
        if self.cap is not None:
            _check_cap(self.cap, "sweep job")

    def to_json(self) -> str:
        return bodies.dump({"cluster": self.cluster, "cursor": self.cursor, "cap": self.cap})

    @classmethod
    def from_json(cls, text: str | bytes) -> SweepJob:
        return cls(**bodies.load(text, "sweep job", (), ("cluster", "cursor", "cap"), InvalidTrimJob))


def over(pair: ClusterPair, cluster: str, user: int, count: int) -> bool:
    """Whether ``user``'s row on ``cluster`` has more than ``count`` columns
    (one filtered read that returns at most one cell)."""
    return bool(read_cells(pair[cluster], TABLE, row_key(user), family=FAMILY, limit=1, offset=count))


def trim_deletes(
    pair: ClusterPair, cluster: str, user: int, cap: int, *, page: int = DEFAULT_TRIM_PAGE
) -> list[Delete]:
    """Deletes of every column of ``user``'s row on ``cluster`` past the
    newest ``cap`` (for that same cluster), read ``page`` columns at a time."""
    if type(cap) is not int or cap < 0:
        raise ValueError(f"cap must be an int >= 0, got {cap!r}")
    pool = pair[cluster]
    row = row_key(user)
    deletes: list[Delete] = []
    after: bytes | None = None
    while True:
        if after is None:
            cells = read_cells(pool, TABLE, row, family=FAMILY, limit=page, offset=cap)
        else:
            cells = read_cells(pool, TABLE, row, family=FAMILY, limit=page, after=after)
        if not cells:
            return deletes
        newest = max(ts for _q, _value, ts in cells)
        deletes += [(row, _FAMILY + b":" + q, newest, "upto") for q, _value, _ts in cells]
        if len(cells) < page:
            return deletes
        after = cells[-1][0]


def apply_trim(pair: ClusterPair, cluster: str, user: int, cap: int, *, page: int = DEFAULT_TRIM_PAGE) -> int:
    """Trims ``user``'s row on ``cluster`` to ``cap`` columns; the columns deleted."""
    deletes = trim_deletes(pair, cluster, user, cap, page=page)
    return delete_versions(pair[cluster], TABLE, deletes) if deletes else 0


@dataclass(frozen=True, slots=True)
class SweepPage:
    users: list[int]  # rows over the cap: each gets a trim
    next_cursor: str | None  # None: the sweep is done


def sweep_page(
    pair: ClusterPair, cluster: str, cursor: str | None, cap: int, *, rows: int = DEFAULT_SWEEP_ROWS
) -> SweepPage:
    """Up to ``rows`` users from ``cursor`` on (None: the start) whose row on
    ``cluster`` has more than ``cap`` columns. The cursor is the next row key
    to scan, in hex (printable, for a job body). Keys that are not feed rows
    are passed over."""
    if type(cap) is not int or cap < 0:
        raise ValueError(f"cap must be an int >= 0, got {cap!r}")
    try:
        start = b"" if cursor is None else bytes.fromhex(cursor)
    except ValueError:
        raise ValueError(f"not a sweep cursor: {cursor!r}") from None
    keys = rows_longer_than(pair[cluster], TABLE, family=FAMILY, count=cap, limit=rows, start=start)
    users: list[int] = []
    for key in keys:
        try:
            users.append(parse_row_key(key))
        except ValueError:
            continue
    # A full page may have more after it; a short one ended the table.
    next_cursor = (keys[-1] + b"\x00").hex() if len(keys) == rows else None
    return SweepPage(users, next_cursor)
