"""Write job bodies: the cells one follow is the reason for, put or
retracted, on one cluster. Every feed change ends as one such body per
cluster (a job on ``feed_write_primary`` or ``feed_write_standby``, or for
a fan-out page its own puts while that cluster takes them:
``tasks.feeds.direct``), so an outage of one cluster only backs up its own
queue.

Body (JSON)::

    {"op": "put", "cluster": "primary" | "standby", "followee": user or board id,
     "rows": [[user id, version], ...], "columns": [qualifier, ...]}
    {"op": "retract", "cluster": ..., "followee": ..., "rows": [[user id, version], ...]}

**The version rule.** A pin is in a user's feed because they follow its
pinner or its board; its cell's timestamp (its version) is the time of that
follow, so every cell a follow brings, through the follow's own job or
through fan-outs, has that one version, and no other follow of the user
has it (``tasks.appdata.graph.follow_clock``). Then:

* ``put``: every row gets every column at the row's version. After the
  put, the follows are read again: a row whose follow is gone (or has
  another time now) gets its version retracted, so a put that arrives after
  the unfollow's retraction, or after a compaction purged it, never stays.
* ``retract``: every cell of each row at exactly that version goes (one
  family-version delete marker a row): all the pins that follow brought,
  and any that arrive later at that version, whatever their columns. A pin
  also reached through another follow keeps that follow's cell.

Replaying a body writes the same cells at the same versions, so retries
and duplicates are safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tasks import bodies
from tasks.appdata import mappings
from tasks.appdata.ids import ObjectType, split_id
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWS_BOARD, USER_FOLLOWS_USER
from tasks.feeds.cells import FAMILY, ROW_LIMIT, TABLE, check_user, parse_qualifier, row_key
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool, delete_versions, put_versions
from tasks.hbase.cells import MAX_TIMESTAMP, check_timestamp

Op = Literal["put", "retract"]
OPS: tuple[Op, ...] = ("put", "retract")
CLUSTERS = (PRIMARY, STANDBY)
# One body is one job: keep it well below the job service's body limit and
# a single HBase batch of reasonable size.
MAX_CELLS = 20_000
MAX_ROWS = 10_000
MAX_COLUMNS = 10_000
_FAMILY = FAMILY.encode()
_PREFIX = _FAMILY + b":"


class InvalidWriteBody(ValueError):
    """A write body that is not one this module would make."""


@dataclass(frozen=True, slots=True)
class WriteBody:
    op: Op
    cluster: str
    followee: int  # the user or board whose follow the rows' versions are
    rows: tuple[tuple[int, int], ...]  # (user, version: the time they followed ``followee``)
    columns: tuple[str, ...] = ()  # qualifiers, without the family; none for a retract

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise InvalidWriteBody(f"write body: {problem}")

    def to_json(self) -> str:
        fields: dict[str, object] = {"op": self.op, "cluster": self.cluster, "followee": self.followee,
                                     "rows": self.rows}  # tuples: JSON arrays
        if self.op == "put":
            fields["columns"] = list(self.columns)
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> WriteBody:
        data = bodies.load(text, "write body", ("op", "cluster", "followee", "rows"), ("columns",), InvalidWriteBody)
        rows, columns = data["rows"], data.get("columns", [])
        if not isinstance(rows, list) or not isinstance(columns, list):
            raise InvalidWriteBody("write body: rows and columns must be lists")
        try:
            pairs = tuple((user, version) for user, version in rows)
        except (TypeError, ValueError):
            pairs = ()
        if len(pairs) != len(rows) or not all(type(row) is list for row in rows):
            raise InvalidWriteBody("write body: every row must be [user id, version]")
        return cls(data["op"], data["cluster"], data["followee"], pairs, tuple(columns))

    def cells(self) -> int:
        return len(self.rows) * max(1, len(self.columns))


def _problem(body: WriteBody) -> str | None:
    if body.op not in OPS:
        return f"op must be put or retract, got {body.op!r}"
    if body.cluster not in CLUSTERS:
        return f"cluster must be primary or standby, got {body.cluster!r}"
    if not body.rows:
        return "rows must not be empty"
    if body.op == "put" and not body.columns:
        return "a put needs columns"
    if body.op == "retract" and body.columns:
        return "a retract takes no columns (it removes every cell of its version)"
    if len(body.rows) > MAX_ROWS or len(body.columns) > MAX_COLUMNS or body.cells() > MAX_CELLS:
        return f"too big: {len(body.rows)} rows x {len(body.columns)} columns (max {MAX_CELLS} cells)"
    try:
        if type(body.followee) is not int or split_id(body.followee).type not in (ObjectType.USER, ObjectType.BOARD):
            raise ValueError(f"followee {body.followee!r} is not a user or board id")
        for user, version in body.rows:
            # The checks of check_user and check_timestamp, inline: a body
            # has up to 10,000 rows. They name the first bad value.
            if type(user) is not int or not 0 < user < ROW_LIMIT or type(version) is not int or not (
                    0 < version < MAX_TIMESTAMP):
                check_user(user)
                check_timestamp(version)
        for q in body.columns:
            if not isinstance(q, str):
                raise ValueError(f"column {q!r} is not a string")
            parse_qualifier(q.encode("ascii", "replace"))
    except ValueError as exc:
        return str(exc)
    return None


def make_bodies(op: Op, followee: int, rows: Sequence[tuple[int, int]], qualifiers: Sequence[bytes] = ()
                ) -> list[WriteBody]:
    """The same write for both clusters (none if there is nothing to write)."""
    if not rows or (op == "put" and not qualifiers):
        return []
    columns = tuple(q.decode("ascii") for q in qualifiers)
    return [WriteBody(op, cluster, followee, tuple(rows), columns) for cluster in CLUSTERS]


@dataclass(frozen=True, slots=True)
class EdgeCells:
    """Cells one follow (``user`` followed ``followee`` at ``version``) is the reason for."""

    user: int
    followee: int
    version: int
    columns: tuple[bytes, ...]  # qualifiers


def put_edges(pool: ClusterPool, store: AppData, edges: Sequence[EdgeCells]) -> int:
    """Puts every edge's cells at its version in one batch, then retracts
    the versions of the edges that are gone from MySQL by now (the fence:
    see the module's docstring). The cells put."""
    cells = [(row_key(e.user), _PREFIX + q, b"", e.version) for e in edges for q in e.columns]
    return _put_then_fence(pool, cells, lambda: gone_edges(store, [(e.user, e.followee, e.version) for e in edges]))


def put_rows(pool: ClusterPool, store: AppData, followee: int, rows: Sequence[tuple[int, int]],
             qualifiers: Sequence[bytes]) -> int:
    """``put_edges`` for the edges of one followee that all bring the same
    columns (a write body: a fan-out page, a follow), without an object a
    row: the same cells, then the same fence."""
    return _put_then_fence(pool, row_cells(rows, qualifiers), lambda: fence_rows(store, followee, rows))


def row_cells(rows: Sequence[tuple[int, int]], qualifiers: Sequence[bytes]) -> list[tuple[bytes, bytes, bytes, int]]:
    """The cells of ``(user, version)`` rows that all bring ``qualifiers``."""
    heads = [_PREFIX + q for q in qualifiers]
    return [(row_key(user), head, b"", version) for user, version in rows for head in heads]


def fence_rows(store: AppData, followee: int, rows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Of ``(user, version)`` follows of ``followee``, those gone from MySQL
    (once each, in order): the rows a put must retract after it."""
    missing = _gone_to(store, followee, rows)
    return [row for row in dict.fromkeys(rows) if row in missing] if missing else []


def _put_then_fence(pool: ClusterPool, cells: list[tuple[bytes, bytes, bytes, int]],
                    gone: Callable[[], list[tuple[int, int]]]) -> int:
    """Puts ``cells``, then retracts the ``(user, version)`` rows ``gone()``
    finds gone from MySQL by then. The cells put."""
    if not cells:
        return 0
    written = put_versions(pool, TABLE, cells)
    rows = gone()
    if rows:
        retract(pool, rows)
    return written


def retract(pool: ClusterPool, rows: Iterable[tuple[int, int]]) -> int:
    """Removes every cell of each ``(user, version)`` row at exactly that version."""
    return delete_versions(pool, TABLE, [(row_key(user), _FAMILY, version, "family_version")
                                         for user, version in dict.fromkeys(rows)])


def gone_edges(store: AppData, edges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Of ``(user, followee, version)``, the ``(user, version)`` of those whose
    follow is no longer in MySQL with that time (the forward tables, the
    truth). A fan-out page (one followee, many users) is one query per
    shard of the users, answering a count unless some follow is gone; a
    backfill page (many followees) reads its users' follows, one query per
    table and shard."""
    wanted = list(dict.fromkeys(edges))
    users = {user for user, _f, _v in wanted}
    followees = {followee for _u, followee, _v in wanted}
    if len(followees) <= len(users):
        gone: set[tuple[int, int, int]] = set()
        for followee in followees:
            edges_to = [(user, version) for user, f, version in wanted if f == followee]
            gone.update((u, followee, v) for u, v in _gone_to(store, followee, edges_to))
        return [(user, version) for user, followee, version in wanted if (user, followee, version) in gone]
    now: dict[tuple[int, int], int] = {}
    for table in (USER_FOLLOWS_USER, USER_FOLLOWS_BOARD):
        for user, rows in mappings.rows_from_many(store, table, users).items():
            now.update(((user, followee), at) for followee, at in rows.items() if followee in followees)
    return [(user, version) for user, followee, version in wanted if now.get((user, followee)) != version]


def _gone_to(store: AppData, followee: int, rows: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Of ``(user, version)`` follows of ``followee``, those gone from MySQL."""
    table = USER_FOLLOWS_BOARD if split_id(followee).type is ObjectType.BOARD else USER_FOLLOWS_USER
    return mappings.unmapped_to(store, table, rows, followee)


def apply_write(pair: ClusterPair, store: AppData, body: WriteBody) -> int:
    """One body on its cluster; the cells written (a retract counts its
    rows). Raises ``tasks.hbase.HBaseError`` or an app-data error on
    failure (the job is retried)."""
    pool = pair[body.cluster]
    if body.op == "retract":
        return retract(pool, body.rows)
    return put_rows(pool, store, body.followee, body.rows, [q.encode("ascii") for q in body.columns])
