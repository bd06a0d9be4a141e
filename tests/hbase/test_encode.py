"""The hand-written putMultiple encoding is byte for byte what thriftpy2
writes for the same structs (a unit test: no server)."""

from __future__ import annotations

import random

from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

from tasks.hbase import encode
from tasks.hbase.idl import THRIFT2


def thriftpy2_bytes(table: bytes, rows: list[tuple[bytes, list[tuple[bytes, bytes, bytes, int]]]]) -> bytes:
    args = THRIFT2.THBaseService.putMultiple_args(table=table, tputs=[
        THRIFT2.TPut(row=row, columnValues=[
            THRIFT2.TColumnValue(family=f, qualifier=q, value=v, timestamp=t) for f, q, v, t in cells
        ]) for row, cells in rows
    ])
    buffer = TCyMemoryBuffer()
    TCyBinaryProtocol(buffer).write_struct(args)
    buffer.flush()
    return bytes(buffer.getvalue())


def ours(table: bytes, rows: list[tuple[bytes, list[tuple[bytes, bytes, bytes, int]]]]) -> bytes:
    return encode.put_multiple_args(table, [
        encode.put(row, [encode.cell(encode.column_head(f, q), v, t) for f, q, v, t in cells]) for row, cells in rows
    ])


def test_random_puts_encode_exactly_as_thriftpy2_encodes_them() -> None:
    rng = random.Random(7)

    def blob(most: int) -> bytes:
        return rng.randbytes(rng.choice([0, 1, rng.randrange(most + 1)]))

    for _ in range(200):
        rows = [(blob(40) or b"r", [(blob(6) or b"f", blob(30), blob(300),
                                     rng.choice([1, 2**63 - 1, rng.randrange(1, 2**63)]))
                                    for _ in range(rng.randrange(1, 6))])
                for _ in range(rng.randrange(1, 8))]
        table = rng.choice([b"t", b"typeahead_wide", blob(60) or b"x"])
        assert ours(table, rows) == thriftpy2_bytes(table, rows)


def test_a_large_value_and_many_cells_keep_their_lengths() -> None:
    rows = [(b"row", [(b"f", b"q%d" % i, b"v" * 70_000 if i == 0 else b"", 1_700_000_000_000 + i)
                      for i in range(1_000)])]
    assert ours(b"table", rows) == thriftpy2_bytes(b"table", rows)
