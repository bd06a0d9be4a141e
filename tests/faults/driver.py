"""A fault test's client, run inside a host of a topology (its stores are
reachable from there only): the in-process client on the shards the
environment names (``PINLATER_SHARDS``, ``PINLATER_CONTROL_URL``).

    python -m tests.faults.driver enqueue QUEUE SECONDS OUT [keyed]   # one job a call, a JSON line each
    python -m tests.faults.driver audit QUEUE OUT             # every job of the queue, its body

``enqueue`` writes ``{"n", "t", "latency_s", "descriptor" | "error"}`` per
call, the job's body being ``job-<n>`` (``keyed``: and its idempotency key,
so the Thrift client may retry a call whose answer was lost); it stops
after SECONDS or on SIGTERM. ``audit`` writes ``{"descriptor", "body"}`` per job found, in any
state, on every shard."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pinlater import CONTINUATION_END, Job, JobState, connect
from pinlater.kit.cli_output import one_line

PACE_S = 0.005  # between enqueues: ~150 a second, a steady stream not a flood


def enqueue(queue: str, seconds: float, out: Path, keyed: bool = False) -> None:
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    client = connect()
    if queue not in client.queue_names():
        client.create_queue(queue)
    deadline = time.monotonic() + seconds
    n = 0
    with out.open("w") as sink:
        while not stop and time.monotonic() < deadline:
            n += 1
            started = time.monotonic()
            record: dict[str, Any] = {"n": n, "t": time.monotonic()}
            try:
                key = f"job-{n}" if keyed else None
                [descriptor] = client.enqueue(queue, [Job(b"job-%d" % n)], idempotency_key=key)
                record["descriptor"] = descriptor
            except Exception as exc:  # noqa: BLE001 (recorded: the test judges it)
                record["error"] = one_line(f"{type(exc).__name__}: {exc}")
            record["latency_s"] = time.monotonic() - started
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            time.sleep(PACE_S)
    client.close()


def audit(queue: str, out: Path) -> None:
    client = connect()
    with out.open("w") as sink:
        for state in JobState:
            continuation = "0"
            while continuation != CONTINUATION_END:
                page = client.scan(queue, state, continuation=continuation, limit=1000, include_body=True)
                for job in page.jobs:
                    sink.write(json.dumps({"descriptor": job.descriptor, "body": (job.body or b"").decode()}) + "\n")
                continuation = page.continuation
    client.close()


def main(argv: list[str]) -> None:
    if len(argv) in (4, 5) and argv[0] == "enqueue" and argv[4:] in ([], ["keyed"]):
        enqueue(argv[1], float(argv[2]), Path(argv[3]), keyed=argv[4:] == ["keyed"])
    elif len(argv) == 3 and argv[0] == "audit":
        audit(argv[1], Path(argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
