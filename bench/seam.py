"""The seam's cost per call: a store call through ``ShardSet.call`` (timed,
counted, classified; tracing off) and an app's store call through the HBase
pools' wrapper, against the same work called bare, in one process.

The work is a function that returns at once, so what is measured is the
instrumentation alone; a real Redis call is ~100 µs, an HBase call more.

    python bench/seam.py                # about ten seconds
    python bench/seam.py --json out.json
    python bench/seam.py --smoke        # a short run for the test suite
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_json
from pinlater.engine.shards import ShardSet
from tasks.hbase.spans import traced

REPEATS = 7


class _Shard:
    shard_id = "bench"


def _work(_: object = None) -> int:
    return 1


def best_ns(loop: Callable[[int], None], calls: int) -> float:
    """The fastest of ``REPEATS`` runs of ``calls`` calls, per call, in ns."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        loop(calls)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true", help="a short run (2,000 calls): checks it runs, times nothing")
    args = parser.parse_args()
    if args.smoke:
        args.calls = 2_000
    backend: Any = _Shard()  # only its shard_id is read
    shards = ShardSet([backend])
    call = shards.call

    def raw(n: int) -> None:
        for _ in range(n):
            _work(backend)

    def seam(n: int) -> None:
        for _ in range(n):
            call(backend, "count", "bench", _work)

    def app(n: int) -> None:
        for _ in range(n):
            traced("bench", "get", "thrift2", _work)

    raw_ns = best_ns(raw, args.calls)
    seam_ns = best_ns(seam, args.calls)
    app_ns = best_ns(app, args.calls)
    result: dict[str, Any] = {
        "calls": args.calls,
        "raw_ns": round(raw_ns, 1),
        "seam_ns": round(seam_ns, 1),
        "seam_overhead_ns": round(seam_ns - raw_ns, 1),
        "seam_ratio": round(seam_ns / raw_ns, 2),
        "app_call_ns": round(app_ns, 1),
        "app_call_overhead_ns": round(app_ns - raw_ns, 1),
        "app_call_ratio": round(app_ns / raw_ns, 2),
    }
    print(json.dumps(result))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
