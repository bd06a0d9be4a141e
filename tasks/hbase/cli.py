"""``pinlater-hbase``: the HBase tables of every installed app on both clusters.

    pinlater-hbase tables            show how each table differs from its definition,
                                     and how each cluster trims a table defined with
                                     the trimming coprocessor
    pinlater-hbase tables --apply    then create, add or alter what differs (online)

The tables are those the apps' manifests name (``pinlater.kit.apps``), as
configured (the feed's carries the trimming coprocessor and its cap,
``PINLATER_FEED_CAP``); a cluster whose table lacks either is trimmed by
the sweep until ``--apply`` attaches it.

Shows before it changes: without ``--apply`` nothing is written. Exit
status: 0 no drift (or all of it applied), 3 drift shown and not applied,
2 refused (a cluster down, a bad setting), 1 an internal error; an error is
one line on stderr (a traceback with -v). Settings: PINLATER_HBASE_*.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pinlater.kit.cli_runner import ErrorStyle, command_parser, run
from tasks.hbase.errors import HBaseError
from tasks.hbase.pair import ClusterPair
from tasks.hbase.pool import ClusterPool
from tasks.hbase.tables import (
    FEED_TRIM_OBSERVER,
    TableDef,
    apply_table,
    compaction_cap,
    installed_tables,
    table_drift,
)

DRIFT = 3
ERRORS = ErrorStyle(refused=(ValueError, HBaseError, OSError))


def _exists(pool: ClusterPool, table: TableDef) -> bool:
    name = table.name.encode()  # the connection lists names without the prefix
    return pool.run("list tables", lambda connection: name in connection.tables())


def cmd_tables(args: argparse.Namespace) -> int:
    tables = installed_tables()
    pair = ClusterPair.from_settings()
    try:
        found = 0
        for pool in pair:
            for table in tables:
                drift = apply_table(pool, table) if args.apply else table_drift(pool, table)
                found += len(drift)
                for item in drift:
                    print(f"{'altered' if args.apply else 'drift'}: {item}")
                if not drift:
                    print(f"ok: {pool.name} {table.name}")
            for table in tables:
                if table.coprocessor == FEED_TRIM_OBSERVER and _exists(pool, table):
                    cap = compaction_cap(pool, table)
                    how = "by the sweep (no trimming coprocessor)" if cap is None else f"by compaction, cap {cap}"
                    print(f"trimming: {pool.name} {table.name} {how}")
        if found and args.apply:  # read back: what was applied must now match
            left = [str(d) for pool in pair for table in tables for d in table_drift(pool, table)]
            for line in left:
                print(f"still differs: {line}")
            return DRIFT if left else 0
        return DRIFT if found else 0
    finally:
        pair.close()


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command_parser("pinlater-hbase", "The installed apps' HBase tables on both clusters.")
    p = sub.add_parser("tables", help="show (and with --apply fix) how each table differs from its definition")
    p.add_argument("--apply", action="store_true", help="create, add or alter what differs, then check again")
    p.set_defaults(fn=cmd_tables)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, ERRORS)


if __name__ == "__main__":
    sys.exit(main())
