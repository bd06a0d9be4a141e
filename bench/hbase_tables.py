"""The feed table's size on disk and its read speed, by data block encoding.

The same feed cells (``--users`` rows of ``--pins`` pins each, the feed's
real row keys and qualifiers, empty values, a follow time per cell as its
timestamp) are written to one table per encoding on the primary cluster,
each flushed and major-compacted (``scripts/hbase admin``), then:

- ``store_bytes``: the size of the table's live store files on disk;
- ``read``: random whole-feed reads of 50 pins (``read_columns``, the feed
  reader's call) for ``--reads`` rows, from one thread, first a cold pass
  then a warm one; p50/p99 of the warm pass.

``ratio_to_none`` is each encoding's size over NONE's, measured in the same
run. The block size is the feed's own (16 KB) for every table, so only the
encoding differs.

    python bench/hbase_tables.py                  # 2,000 users x 500 pins
    python bench/hbase_tables.py --smoke          # small and quick (CI)
    python bench/hbase_tables.py --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results import write_json  # noqa: E402
from bench.support import HBaseAdmin, percentile_ms, warn_of_quick_jit  # noqa: E402
from tasks.feeds.cells import qualifier, row_key  # noqa: E402
from tasks.feeds.tables import FOLLOWING_FEED  # noqa: E402
from tasks.hbase import ClusterPair, Family, HBaseSettings, TableDef, drop_table, ensure_table  # noqa: E402
from tasks.hbase.reads import read_columns  # noqa: E402
from tasks.hbase.tables import table_drift  # noqa: E402
from tasks.hbase.writes import put_versions  # noqa: E402

ENCODINGS = ("NONE", "PREFIX", "FAST_DIFF")
PREFIX = "benchtables"


def _table(encoding: str) -> TableDef:
    feed = FOLLOWING_FEED.family("feed")
    return TableDef(f"feed_{encoding.lower()}", (Family(
        "feed", max_versions=feed.max_versions, block_size=feed.block_size, data_block_encoding=encoding),))


def _store_bytes(table: str) -> int:
    """The size of each region's live file of the feed family, right after a
    major compaction: the newest in its folder. The files it replaced stay
    beside it until the region server's discharger archives them (every two
    minutes), so a sum of the folder would count them too."""
    var = Path(os.environ.get("PINLATER_VAR", REPO / ".var"))
    root = var / "hbase" / "primary" / "data" / "data" / "default" / f"{PREFIX}_{table}"
    if not root.is_dir():
        raise SystemExit(f"error: no store folder {root} (is the primary cluster the one scripts/services runs?)")
    total = 0
    for store in root.glob("*/feed"):
        files = [p.stat() for p in store.iterdir() if p.is_file() and not p.name.startswith(".")]
        if files:
            total += max(files, key=lambda f: f.st_mtime_ns).st_size
    return total


def _cells(users: int, pins: int, seed: int) -> list[tuple[bytes, bytes, bytes, int]]:
    rng = random.Random(seed)
    cells = []
    base = 1_764_000_000_000
    for user in range(users):
        row = row_key(10_000_000 + user)
        follow_times = [base + rng.randrange(10**9) for _ in range(10)]
        for _ in range(pins):
            created = base + rng.randrange(10**9)
            column = b"feed:" + qualifier(created, rng.randrange(1, 2**60))
            cells.append((row, column, b"", rng.choice(follow_times)))
    return cells


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = HBaseSettings.from_env()
    pair = ClusterPair.from_settings(dataclasses.replace(settings, table_prefix=PREFIX, call_timeout_s=60.0))
    pool = pair.primary
    admin = HBaseAdmin("primary")
    cells = _cells(args.users, args.pins, args.seed)
    rows = sorted({c[0] for c in cells})
    rng = random.Random(args.seed)
    sample = [rng.choice(rows) for _ in range(args.reads)]
    result: dict[str, Any] = {"users": args.users, "pins_per_user": args.pins, "cells": len(cells),
                              "block_size": FOLLOWING_FEED.family("feed").block_size, "encodings": {}}
    try:
        for encoding in ENCODINGS:
            table = _table(encoding)
            drop_table(pool, table.name)
            ensure_table(pool, table)
            started = time.monotonic()
            put_versions(pool, table.name, cells)
            write_s = time.monotonic() - started
            admin.major_compact(f"{PREFIX}_{table.name}")
            drift = table_drift(pool, table)
            if drift:
                raise SystemExit(f"error: table {table.name} is not as defined: {'; '.join(map(str, drift))}")
            size = _store_bytes(table.name)
            passes = []
            for _ in range(2):
                times = []
                for row in sample:
                    t0 = time.monotonic()
                    got = read_columns(pool, table.name, row, family="feed", limit=50)
                    times.append(time.monotonic() - t0)
                    assert len(got) == 50, f"{row!r}: {len(got)} pins"
                passes.append(times)
            result["encodings"][encoding] = {
                "store_bytes": size, "bytes_per_cell": round(size / len(cells), 1),
                "write_cells_per_s": round(len(cells) / write_s),
                "read_cold_p50_ms": percentile_ms(passes[0], 0.5), "read_p50_ms": percentile_ms(passes[1], 0.5),
                "read_p99_ms": percentile_ms(passes[1], 0.99),
            }
            print(f"{encoding:>9}: {size / 1e6:8.2f} MB ({size / len(cells):5.1f} B/cell), "
                  f"read p50 {percentile_ms(passes[1], 0.5):.2f} ms p99 {percentile_ms(passes[1], 0.99):.2f} ms",
                  flush=True)
        none = result["encodings"]["NONE"]["store_bytes"]
        for numbers in result["encodings"].values():
            numbers["ratio_to_none"] = round(numbers["store_bytes"] / none, 3)
    finally:
        if not args.keep:
            for encoding in ENCODINGS:
                drop_table(pool, _table(encoding).name)
        admin.close()
        pair.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--pins", type=int, default=500)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="100 users x 100 pins, 200 reads")
    parser.add_argument("--keep", action="store_true", help="keep the tables")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    warn_of_quick_jit()
    if args.smoke:
        args.users, args.pins, args.reads = 100, 100, 200
    result = run(args)
    for encoding, numbers in result["encodings"].items():
        print(f"{encoding:>9}: {numbers['ratio_to_none']:.3f} x NONE's size")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
