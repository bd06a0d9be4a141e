"""Write job bodies: one batched put or delete, at one timestamp, on one
cluster. Every feed change ends as one such body per cluster (a job on
``feed_write_primary`` or ``feed_write_standby``), so an outage of one
cluster only backs up its own queue.

Body (JSON)::

    {"op": "put" | "delete", "cluster": "primary" | "standby",
     "rows": [user id, ...], "columns": [qualifier, ...], "timestamp": ms}

Every row gets every column (fan-out: many rows, one column; follow and
trim: one row, many columns). Replaying a body writes the same cells at the
same time, so retries are safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tasks.feeds import bodies
from tasks.feeds.cells import FAMILY, TABLE, check_user, parse_qualifier, row_key
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, delete_cells, put_cells
from tasks.hbase.cells import check_timestamp

Op = Literal["put", "delete"]
OPS: tuple[Op, ...] = ("put", "delete")
CLUSTERS = (PRIMARY, STANDBY)
# One body is one job: keep it well below the job service's body limit and
# a single HBase batch of reasonable size.
MAX_CELLS = 20_000
MAX_ROWS = 10_000
MAX_COLUMNS = 10_000


class InvalidWriteBody(ValueError):
    """A write body that is not one this module would make."""


@dataclass(frozen=True, slots=True)
class WriteBody:
    op: Op
    cluster: str
    rows: tuple[int, ...]
    columns: tuple[str, ...]  # qualifiers, without the family
    timestamp: int

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise InvalidWriteBody(f"write body: {problem}")

    def to_json(self) -> str:
        return bodies.dump(
            {
                "op": self.op,
                "cluster": self.cluster,
                "rows": list(self.rows),
                "columns": list(self.columns),
                "timestamp": self.timestamp,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> WriteBody:
        keys = ("op", "cluster", "rows", "columns", "timestamp")
        data = bodies.load(text, "write body", keys, (), InvalidWriteBody)
        rows, columns = data["rows"], data["columns"]
        if not isinstance(rows, list) or not isinstance(columns, list):
            raise InvalidWriteBody("write body: rows and columns must be lists")
        return cls(data["op"], data["cluster"], tuple(rows), tuple(columns), data["timestamp"])

    def cells(self) -> int:
        return len(self.rows) * len(self.columns)


def _problem(body: WriteBody) -> str | None:
    if body.op not in OPS:
        return f"op must be put or delete, got {body.op!r}"
    if body.cluster not in CLUSTERS:
        return f"cluster must be primary or standby, got {body.cluster!r}"
    if not body.rows or not body.columns:
        return "rows and columns must not be empty"
    if len(body.rows) > MAX_ROWS or len(body.columns) > MAX_COLUMNS or body.cells() > MAX_CELLS:
        return f"too big: {len(body.rows)} rows x {len(body.columns)} columns (max {MAX_CELLS} cells)"
    try:
        check_timestamp(body.timestamp)
        for user in body.rows:
            check_user(user)
        for q in body.columns:
            if not isinstance(q, str):
                raise ValueError(f"column {q!r} is not a string")
            parse_qualifier(q.encode("ascii", "replace"))
    except ValueError as exc:
        return str(exc)
    return None


def make_bodies(op: Op, rows: list[int], qualifiers: list[bytes], timestamp: int) -> list[WriteBody]:
    """The same write for both clusters (none if there is nothing to write)."""
    if not rows or not qualifiers:
        return []
    columns = tuple(q.decode("ascii") for q in qualifiers)
    return [WriteBody(op, cluster, tuple(rows), columns, timestamp) for cluster in CLUSTERS]


def apply_write(pair: ClusterPair, body: WriteBody) -> int:
    """One batched put or delete at the body's timestamp on its cluster; the
    number of cells. Raises ``tasks.hbase.HBaseError`` on failure (the job
    is retried)."""
    pool = pair[body.cluster]
    family = FAMILY.encode() + b":"
    columns = [family + q.encode("ascii") for q in body.columns]
    if body.op == "put":
        cells: dict[bytes, dict[bytes, bytes]] = {row_key(u): dict.fromkeys(columns, b"") for u in body.rows}
        return put_cells(pool, TABLE, cells, timestamp=body.timestamp)
    return delete_cells(pool, TABLE, {row_key(u): columns for u in body.rows}, timestamp=body.timestamp)
