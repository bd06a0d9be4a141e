"""Batched writes and deletes with an explicit cell timestamp.

HBase's Thrift1 ``mutateRowsTs`` takes one timestamp per call, so a batch is
"these cells at time T". Within one call puts are applied before deletes, so a
put and a delete of one cell in one batch always ends deleted: puts and
deletes are separate functions here and never share a call.

A delete at T masks every version <= T of its columns until a major
compaction, including puts at older timestamps that arrive later. This is
what makes out-of-order follow/unfollow safe: an unfollow at t2 beats the
follow's puts at t1 < t2 whatever order the workers run them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tasks.hbase.cells import check_column, check_timestamp
from tasks.hbase.errors import IDL
from tasks.hbase.pool import ClusterPool

DEFAULT_BATCH_SIZE = 1000  # cells per mutateRows call
Mutation = IDL.Mutation
BatchMutation = IDL.BatchMutation


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
    cells written.

    Builds Thrift's mutations itself rather than through happybase's
    ``Batch``: a fan-out puts one cell into a thousand rows, and sharing one
    ``Mutation`` per distinct cell halves the client's work per cell."""
    check_timestamp(timestamp)
    shared: dict[tuple[bytes, bytes], Any] = {}
    plan: list[tuple[bytes, list[Any]]] = []
    cells = 0
    # Rows in key order: the region server inserts a sorted batch into its
    # memstore with better locality, and splits it by region in one pass.
    for row, columns in sorted(rows.items()):
        mutations = []
        for column, value in columns.items():
            mutation = shared.get((column, value))
            if mutation is None:
                check_column(column)
                mutation = shared[(column, value)] = Mutation(isDelete=False, column=column, value=value)
            mutations.append(mutation)
        if mutations:
            plan.append((row, mutations))
            cells += len(mutations)
    if not cells:
        return 0

    def work(connection: Any) -> int:
        handle = connection.table(table)
        chunk: list[Any] = []
        size = 0
        for row, mutations in plan:
            chunk.append(BatchMutation(row, mutations))
            size += len(mutations)
            if size >= batch_size:
                handle.connection.client.mutateRowsTs(handle.name, chunk, timestamp, {})
                chunk, size = [], 0
        if chunk:
            handle.connection.client.mutateRowsTs(handle.name, chunk, timestamp, {})
        return cells

    return pool.run(f"put {cells} cells into {table} at {timestamp}", work)


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
    plan: dict[bytes, list[bytes]] = {}
    for row, columns in rows.items():
        listed = [check_column(c) for c in columns]
        if not listed:
            raise ValueError(f"delete_cells: no columns given for row {row!r} (whole-row deletes are not offered)")
        plan[row] = listed
    cells = sum(len(c) for c in plan.values())
    if not cells:
        return 0

    def work(connection: Any) -> int:
        with connection.table(table).batch(timestamp=timestamp, batch_size=batch_size) as batch:
            for row, columns in plan.items():
                batch.delete(row, columns)
        return cells

    return pool.run(f"delete {cells} cells from {table} at {timestamp}", work)
