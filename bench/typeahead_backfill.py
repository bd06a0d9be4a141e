"""The backfill half of bench/typeahead.py, in its worker processes: the
index rebuilt by ``tasks.typeahead.sync.rebuild`` page by page, and the two
raw peers writing the same precomputed cells, a happybase loop (one
``table.batch(timestamp=version)`` per version and table), a Thrift2 loop
(``putMultiple`` of thriftpy2 structs, a timestamp per cell) and the
project's own put call with nothing read first, each overlapped on as many
connections per process as the writer has (PINLATER_HBASE_POOL_SIZE).
And the rebuild through the Contacts Service (``pinlater-typeahead
serve-thrift --processes N``, N processes of its own, as
``PINLATER_TYPEAHEAD_SERVICE`` makes the backfill's pages call it), from
the same number N of processes.
Also the rebuild as a backfill runs it beside the lookups (``through_jobs``:
page jobs on a PinLater queue with the backfill queue's cap and rate), the
index built once for ``--lookups-only`` (``build_index``), and every user's
second_degree list filled once the index is (``second_backfill``)."""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import pickle
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import happybase
from thriftpy2.protocol.cybin import TCyBinaryProtocolFactory  # type: ignore[attr-defined]
from thriftpy2.rpc import make_client
from thriftpy2.transport.buffered import TCyBufferedTransportFactory  # type: ignore[attr-defined]

from bench.core import settings_for
from bench.support import CpuCost, procfile_niceness, rotating
from pinlater import Ack, Job, JobService, JobState
from pinlater.errors import DequeueRateLimited
from pinlater.settings import Settings
from tasks.appdata.store import AppData
from tasks.backfill import queue as backfill_queue
from tasks.hbase import ClusterPair, ClusterPool, HBaseSettings, put_versions
from tasks.hbase.idl import THRIFT2
from tasks.hbase.settings import Address
from tasks.hbase.thrift2 import write_width
from tasks.typeahead import second, sync, truth
from tasks.typeahead.entries import Entry, group_by_version
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.updates import ServiceUpdates
from workers.gc_policy import tune_gc
from workers.settings import TransportSettings

PAGE = 500  # users per backfill page
REPO = Path(__file__).resolve().parent.parent

_worker: dict[str, Any] = {}
# The Contacts Service's port, set before the pool forks (its processes read it).
_service: dict[str, int] = {}


@contextlib.contextmanager
def serving(command: str, processes: int = 1) -> Iterator[int]:
    """``pinlater-typeahead <command> --port 0`` as its own process (of
    ``processes`` for ``serve-thrift``), on this run's settings; yields its
    port once it listens, stops it after."""
    extra = ["--metrics-port", "0", "--processes", str(processes)] if command == "serve-thrift" else []
    proc = subprocess.Popen([sys.executable, "-m", "tasks.typeahead.cli", command, "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        listening = re.search(r" listening on \S+:(\d+)", line)
        if listening is None:
            raise SystemExit(f"bench/typeahead.py: pinlater-typeahead {command} did not start: {line!r}")
        yield int(listening.group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _service_page(owners: list[int]) -> int:
    updates = _worker.get("service")
    if updates is None:
        updates = _worker["service"] = ServiceUpdates(Address("127.0.0.1", _service["port"]))
    return int(updates.rebuild("primary", owners))


def init_worker() -> None:
    """Each process: its own AppData, ClusterPair and raw happybase
    connection, and the collector a worker process runs with."""
    tune_gc()
    hbase = HBaseSettings.from_env()
    _worker["store"] = AppData.from_env()
    _worker["pair"] = ClusterPair.from_settings(hbase)
    _worker["second_limits"] = second.Limits.of(TypeaheadSettings.from_env())
    # As many connections as the ClusterPool has: the raw loop overlaps its
    # calls the way tasks.typeahead.writer does.
    _worker["threads"] = hbase.pool_size
    _worker["raw"] = happybase.ConnectionPool(hbase.pool_size, host=hbase.primary.host, port=hbase.primary.port,
                                              table_prefix=hbase.table_prefix, timeout=60_000)


def _warm(owner: int) -> int:
    """Opens every connection of the process before the clock starts."""
    truth.entries_of_owners(_worker["store"], [owner])
    _worker["pair"].primary.run("warm", lambda connection: connection.tables())
    with _worker["raw"].connection() as connection:
        return len(connection.tables())


def rebuild_page(owners: list[int]) -> int:
    return sync.rebuild(_worker["store"], _worker["pair"].primary, owners)


def rebuild_second_page(owners: list[int]) -> int:
    return sync.rebuild_second(_worker["store"], _worker["pair"].primary, owners, _worker["second_limits"])


def drain_pages(settings: Settings, queue: str, until: float, poll_s: float) -> tuple[int, int, int]:
    """In a pool process, as the Procfile's ``backfill`` worker runs it (at
    its niceness): page jobs (a JSON list of owners) dequeued one at a time
    under the queue's cap and rate, each rebuilt with the backfill task's
    write width (one write at a time under a cap), its ACK riding on the
    next dequeue; a refusal by the rate waits what it says and an empty
    answer ``poll_s``, as the Celery transport's channel does. Until the
    queue is paused and has nothing for it, or ``until`` (wall clock); the
    pages and users done, and the niceness they ran at."""
    os.setpriority(os.PRIO_PROCESS, 0, procfile_niceness("backfill"))
    pages = users = 0
    acks: list[Ack] = []
    with JobService.from_settings(settings, source=f"benchta-{os.getpid()}") as client:
        while time.time() < until:
            try:
                got = client.dequeue(queue, 1, succeeded=acks)
                wait_s = poll_s
                acks = []
            except DequeueRateLimited as exc:  # the ACKs were not applied: they ride again
                got, wait_s = [], max(exc.retry_after_ms, 5) / 1000
            if not got:
                if client.queue_config(queue, fresh=True).paused:
                    break
                time.sleep(wait_s)
                continue
            # As the backfill task does: one write at a time under the queue's cap.
            width = backfill_queue.page_write_width(client.queue_config(queue))
            for job in got:
                owners = json.loads(job.body)
                with write_width(width):
                    rebuild_page(owners)
                acks.append(Ack(job.descriptor, claim=job.claim))
                pages, users = pages + 1, users + len(owners)
        if acks:
            client.ack(queue, succeeded=acks)
    return pages, users, os.getpriority(os.PRIO_PROCESS, 0)


def through_jobs(pool: Any, pages: list[list[int]], processes: int, phases: Callable[[], dict[str, Any]]
                 ) -> dict[str, Any]:
    """``phases()`` while ``processes`` pool processes run the rebuild's
    pages as jobs of a PinLater queue with the backfill queue's cap and
    rate; what the backfill did meanwhile."""
    settings = settings_for("redis")
    queue = f"benchta_backfill_{uuid.uuid4().hex[:8]}"
    with JobService.from_settings(settings, source="benchta") as client:
        config = client.create_queue(queue, **backfill_queue.create_options())
        for start in range(0, len(pages), 1000):
            client.enqueue(queue, [Job(json.dumps(p).encode()) for p in pages[start:start + 1000]])
        started = time.time()
        poll_s = TransportSettings(settings).poll_interval_s  # the workers' default
        drains = [pool.apply_async(drain_pages, (settings, queue, started + 3600, poll_s)) for _ in range(processes)]
        result = phases()
        seconds = time.time() - started
        # Paused, the drains stop after the page each is on; what is left goes.
        client.pause(queue)
        while client.delete_jobs(queue, JobState.PENDING, limit=10_000):
            pass
    done = [0, 0]
    niceness = set()
    stop_by = time.time() + 120
    for d in drains:
        pages_done, users_done, nice = d.get(max(1.0, stop_by - time.time()))
        done[0] += pages_done
        done[1] += users_done
        niceness.add(nice)
    if len(niceness) != 1:
        raise RuntimeError(f"the backfill's processes ran at different niceness: {sorted(niceness)}")
    return {**result, "processes": processes,
            "backfill": {"max_running": config.max_running, "max_dequeue_rate": config.max_dequeue_rate,
                         "niceness": niceness.pop(),
                         "pages": done[0], "users": done[1], "seconds": round(seconds, 1),
                         "users_per_s": round(done[1] / seconds, 1) if seconds else 0.0}}


def build_index(pages: list[list[int]], processes: int) -> float:
    """The index built once by the rebuild (``--lookups-only``); the seconds it took."""
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(processes, initializer=init_worker) as pool:
        pool.map(rebuild_page, pages, chunksize=1)
    return time.perf_counter() - started


def second_backfill(pages: list[list[int]], processes: int, pool: ClusterPool) -> dict[str, Any]:
    """Every user's second_degree list, filled by the
    backfill's work function a page at a time (the pages and processes of
    the index's backfill, the primary only); then every list read back,
    outside the clock, for how long the lists are."""
    elapsed, cells = _timed(processes, pages[0][0], rebuild_second_page, pages)
    users = sum(len(page) for page in pages)
    lengths = [len(listed or ()) for page in pages for _ts, listed in second.stored_lists(pool, page).values()]
    limits = second.Limits.of(TypeaheadSettings.from_env())
    return {
        "cluster": "primary", "users": users, "pages": len(pages), "page_size": PAGE, "processes": processes,
        "limits": {"followees": limits.followees, "per_followee": limits.per_followee, "cap": limits.cap},
        "seconds": elapsed, "users_per_s": users / elapsed, "cells": cells, "cells_per_user": cells / users,
        "users_listed": sum(n > 0 for n in lengths), "listed_per_user": sum(lengths) / users,
    }


# A page's cells as put_entries writes them: per version (the cell timestamp) and table, rows in key order.
RawPlan = list[tuple[int, str, list[tuple[bytes, dict[bytes, bytes]]]]]


def _precompute_page(job: tuple[list[int], str]) -> tuple[str, int, int, int]:
    """The page's cells, pickled to ``path``: (path, entries, cells, put calls)."""
    owners, path = job
    entries = truth.entries_of_owners(_worker["store"], owners)
    page: list[Entry] = [e for owner in owners for e in entries[owner]]
    plan: RawPlan = []
    cells = calls = 0
    for version, tables in sorted(group_by_version([(e.version, e.cells()) for e in page]).items()):
        for table, rows in tables.items():
            plan.append((version, table, sorted(rows.items())))
            count = sum(len(columns) for columns in rows.values())
            cells += count
            calls += max(1, math.ceil(count / 1000))
    Path(path).write_bytes(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
    return path, len(page), cells, calls


def _raw_call(item: tuple[int, str, list[tuple[bytes, dict[bytes, bytes]]]]) -> int:
    version, table, rows = item
    cells = 0
    with _worker["raw"].connection() as connection, \
            connection.table(table).batch(timestamp=version, batch_size=1000) as batch:
        for row, columns in rows:
            batch.put(row, columns)
            cells += len(columns)
    return cells


def _raw_page(path: str) -> int:
    plan: RawPlan = pickle.loads(Path(path).read_bytes())
    with ThreadPoolExecutor(max_workers=_worker["threads"]) as executor:
        return sum(executor.map(_raw_call, plan))


def _raw_encoded_page(path: str) -> int:
    """The page's cells through the project's own write call,
    ``tasks.hbase.put_versions`` (puts encoded from values, no structs), one
    call per table overlapped on as many threads as the writer has
    connections: the rebuild's writes with nothing read first, so the
    rebuild's ratio to it is what its reads and planning cost."""
    plan: RawPlan = pickle.loads(Path(path).read_bytes())
    by_table: dict[str, list[tuple[bytes, bytes, bytes, int]]] = defaultdict(list)
    for version, table, rows in plan:
        by_table[table] += [(row, column, value, version) for row, columns in rows for column, value in columns.items()]
    pool = _worker["pair"].primary
    with ThreadPoolExecutor(max_workers=_worker["threads"]) as executor:
        return sum(executor.map(lambda item: put_versions(pool, *item), sorted(by_table.items())))


class _Thrift2Clients(threading.local):
    """One plain thriftpy2 connection to the primary's Thrift2 server per
    thread (binary protocol, buffered transport: the server's defaults)."""

    client: Any = None


_thrift2 = _Thrift2Clients()


def _thrift2_client() -> Any:
    if _thrift2.client is None:
        address = HBaseSettings.from_env().primary_thrift2
        _thrift2.client = make_client(THRIFT2.THBaseService, address.host, address.port, timeout=60_000,
                                      proto_factory=TCyBinaryProtocolFactory(),
                                      trans_factory=TCyBufferedTransportFactory())
    return _thrift2.client


def _raw2_call(item: tuple[bytes, list[Any]]) -> int:
    table, puts = item
    _thrift2_client().putMultiple(table, puts)
    return sum(len(put.columnValues) for put in puts)


def _raw2_page(path: str) -> int:
    """The page's cells through Thrift2: each cell at its own version, grouped
    by row into one TPut, about 1,000 cells a putMultiple (whole rows), the
    calls overlapped on as many threads as the writer has connections."""
    plan: RawPlan = pickle.loads(Path(path).read_bytes())
    prefix = HBaseSettings.from_env().table_prefix
    by_row: dict[tuple[str, bytes], list[Any]] = defaultdict(list)
    for version, table, rows in plan:
        for row, columns in rows:
            by_row[(table, row)].extend(
                THRIFT2.TColumnValue(family=f, qualifier=q, value=v, timestamp=version)
                for f, _, q in (c.partition(b":") for c in columns) for v in (columns[f + b":" + q],))
    calls: list[tuple[bytes, list[Any]]] = []
    for (table, row), cells in sorted(by_row.items()):
        name = f"{prefix}_{table}".encode() if prefix else table.encode()
        if not calls or calls[-1][0] != name or sum(len(p.columnValues) for p in calls[-1][1]) >= 1000:
            calls.append((name, []))
        calls[-1][1].append(THRIFT2.TPut(row=row, columnValues=cells))
    with ThreadPoolExecutor(max_workers=_worker["threads"]) as executor:
        return sum(executor.map(_raw2_call, calls))


def _timed(processes: int, warm_owner: int, fn: Callable[[Any], int], work: Sequence[Any]) -> tuple[float, int]:
    """Wall time of ``fn`` over ``work`` in ``processes`` processes (pool
    start and connections not counted) and the sum of what it returned."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(processes, initializer=init_worker) as pool:
        pool.map(_warm, [warm_owner] * processes * 2, chunksize=1)
        started = time.perf_counter()
        total = sum(pool.imap_unordered(fn, work, chunksize=1))
        elapsed = time.perf_counter() - started
    return elapsed, total


def backfill_bench(pages: list[list[int]], processes: int, rounds: int, workdir: Path,
                   settle: Callable[[], float]) -> dict[str, Any]:
    """Each writer ``rounds`` times, ``settle`` (the index emptied) before
    every run: each run starts where the first would, none pays for the
    flushes and compactions of the writes before it, and none reads what
    another left (a rebuild reads what the index holds of its owners)."""
    warm_owner = pages[0][0]
    t = time.perf_counter()
    jobs = [(page, str(workdir / f"page{i:05d}.pickle")) for i, page in enumerate(pages)]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(processes, initializer=init_worker) as pool:
        planned = pool.map(_precompute_page, jobs, chunksize=1)
    precompute_s = time.perf_counter() - t
    paths = [path for path, _entries, _cells, _calls in planned]
    entries = sum(p[1] for p in planned)
    cells = sum(p[2] for p in planned)
    calls = sum(p[3] for p in planned)
    users = sum(len(page) for page in pages)
    written: dict[str, list[int]] = {"rebuild": [], "raw": [], "raw_thrift2": [], "raw_encoded": [],
                                     "rebuild_service": []}
    settle_s: list[float] = []
    cpu = CpuCost()

    def measured(name: str, fn: Callable[[Any], int], work: Sequence[Any]) -> Callable[[], float]:
        def run() -> float:
            elapsed, count = _timed(processes, warm_owner, fn, work)
            written[name].append(count)
            return elapsed

        costed = cpu.costed(name, run)

        def settled_run() -> float:
            settle_s.append(settle())
            return costed()

        return settled_run

    with serving("serve-thrift", processes) as port:
        _service["port"] = port
        rebuild_s, raw_s, raw2_s, encoded_s, service_s = rotating(
            rounds, measured("rebuild", rebuild_page, pages), measured("raw", _raw_page, paths),
            measured("raw_thrift2", _raw2_page, paths), measured("raw_encoded", _raw_encoded_page, paths),
            measured("rebuild_service", _service_page, pages))
    rebuild_median, raw_median = statistics.median(rebuild_s), statistics.median(raw_s)
    service_median = statistics.median(service_s)
    raw2_median, encoded_median = statistics.median(raw2_s), statistics.median(encoded_s)
    return {
        "cluster": "primary", "users": users, "pages": len(pages), "page_size": PAGE, "processes": processes,
        "rounds": rounds, "entries": entries, "cells": cells, "put_calls": calls,
        "cells_written": written, "precompute_s": precompute_s, "settle_s": settle_s,
        "rebuild_s": rebuild_s, "raw_s": raw_s,
        "rebuild_users_per_s": users / rebuild_median, "rebuild_cells_per_s": cells / rebuild_median,
        "raw_users_per_s": users / raw_median, "raw_cells_per_s": cells / raw_median,
        "ratio": raw_median / rebuild_median,
        "raw_thrift2_s": raw2_s,
        "raw_thrift2_users_per_s": users / raw2_median, "raw_thrift2_cells_per_s": cells / raw2_median,
        "ratio_thrift2": raw2_median / rebuild_median,
        "raw_encoded_s": encoded_s,
        "raw_encoded_users_per_s": users / encoded_median, "raw_encoded_cells_per_s": cells / encoded_median,
        "ratio_encoded": encoded_median / rebuild_median,
        # The rebuild through the Contacts Service (as many processes of its
        # own as the backfill has) against the rebuild in the backfill's.
        "rebuild_service_s": service_s, "service_processes": processes,
        "rebuild_service_users_per_s": users / service_median,
        "ratio_service": rebuild_median / service_median,
        # CPU ms a user, per writer: the machine's, each server kind's, and the
        # writer's own processes ("clients"); both cores are busy for every writer.
        "cpu_ms_per_user": cpu.mean(per=users / 1000),
    }
