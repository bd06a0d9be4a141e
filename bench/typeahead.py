"""The typeahead's contacts index on HBase: backfill throughput against raw
happybase and raw Thrift2 peers, and lookup latency at a sustained request
rate, on a settled index and beside a running rebuild.

Load: a GraphSpec graph (Zipf follows, ~10 per user, a few celebrities with
large follower counts; real-looking names), address books and social
imports for some users, a share of the address books' emails linked to
Pinterest users, so every source of the index is exercised.

Backfill (``bench/typeahead_backfill.py``): the index rebuilt for every
user by the backfill's work function ``tasks.typeahead.sync.rebuild`` in
pages of 500 consecutive users of one shard, from N processes (each its
own AppData and ClusterPair), writing to the primary cluster only; then
every user's second_degree list by ``sync.rebuild_second`` in the same
pages and processes (``second_degree_backfill``). Beside
it, in the same run, two raw peers writing the same cells (computed once
per page with ``truth.entries_of_owners`` and ``Entry.cells``, pickled) in
the same number of processes: a happybase loop, one
``table.batch(timestamp=version)`` per version and table, and a Thrift2
loop, ``putMultiple`` with a timestamp per cell. Each round starts with a
different writer; medians are compared.

Lookups: a ``ContactsIndex`` answering random users' 1-2 token prefixes of
names in their own contacts (a quarter of them names in their
second_degree lists), at a fixed rate from a thread pool; latency
counts from each request's scheduled time (open loop). The time in HBase
scans, in decoding their cells and in ranking is recorded per request.
The most-followed celebrity's lookups are measured on their own. Both
are measured once the tables are flushed and major-compacted; then while
the index is rebuilt as a backfill is, page jobs on a PinLater queue with
the ``backfill`` queue's own cap and rate, run by ``--backfill-workers``
processes (``during_backfill``, shown as ``+bf``); then while one process
rebuilds it as fast as it can (``during_unlimited_backfill``, ``+bf!``).
The primary region server's GC pauses in each phase come from its GC log.
The settled phases are measured again through the servers a client would
call, each a process of its own started as the Procfile starts it: the
Contacts Service over Thrift (``pinlater-typeahead serve-thrift``) and the
HTTP endpoint (``pinlater-typeahead serve``), beside each other in the run
(``served``). The lookups, and each server's, start after a
warm-up of both kinds of queries, so that no phase pays for the
clusters' first compilations.
The printed report and its targets are in ``bench/typeahead_report.py``.

    python bench/typeahead.py                 # 100,000 users, 2 rounds, lookups 200/s for 20 s
    python bench/typeahead.py --lookups-only  # the index built once, then the lookup phases alone
    python bench/typeahead.py --smoke         # small and quick (CI)
    python bench/typeahead.py --json out.json

Uses the local servers of ``scripts/services``, with its own app-data
databases (``appdata_benchta_``) and HBase tables (prefix ``benchta``), made
fresh each run and dropped at its end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


import tasks.typeahead.index as index_module  # noqa: E402
from bench.results import write_json  # noqa: E402
from bench.support import (  # noqa: E402
    HBaseAdmin,
    cpu_snapshot,
    cpu_spent,
    idle_cpu,
    open_loop,
    own_collections,
    warn_of_quick_jit,
)
from bench.typeahead_backfill import (  # noqa: E402
    PAGE,
    backfill_bench,
    build_index,
    init_worker,
    rebuild_page,
    second_backfill,
    through_jobs,
)
from bench.typeahead_report import TARGET_P99_MS, report  # noqa: E402
from bench.typeahead_second import second_names, shows_second  # noqa: E402
from bench.typeahead_served import LOOKUP_SERVICE_PROCESSES, Query, served_bench, summary, warm_up, with_gc  # noqa: E402
from tasks.appdata import contacts, generate, schema  # noqa: E402
from tasks.appdata.generate import GraphPlan, GraphSpec  # noqa: E402
from tasks.appdata.ids import split_id  # noqa: E402
from tasks.appdata.names import person_name  # noqa: E402
from tasks.appdata.store import AppData  # noqa: E402
from tasks.hbase import ClusterPair, ClusterPool, HBaseSettings, drop_table, ensure_table  # noqa: E402
from tasks.typeahead import second, truth  # noqa: E402
from tasks.typeahead.index import ContactsIndex  # noqa: E402
from tasks.typeahead.settings import TypeaheadSettings  # noqa: E402
from tasks.typeahead.sources import SOURCES  # noqa: E402
from tasks.typeahead.tables import TYPEAHEAD_SECOND, TYPEAHEAD_TALL, TYPEAHEAD_WIDE  # noqa: E402
from tasks.typeahead.tokens import tokenize  # noqa: E402
from workers.gc_policy import tune_gc  # noqa: E402

BENCH_ENV = {
    "PINLATER_APPDATA_DATABASE_PREFIX": "appdata_benchta_",
    "PINLATER_HBASE_TABLE_PREFIX": "benchta",
    # Only the primary holds the index here: however late, the served
    # lookups are the primary's, never the standby's empty tables.
    "PINLATER_TYPEAHEAD_STANDBY_AFTER_MS": "60000",
}
SECOND_SHARE = 0.25  # of queries typed for a second_degree contact, so that source is read and shown
INDEX_TABLES = (TYPEAHEAD_WIDE, TYPEAHEAD_TALL, TYPEAHEAD_SECOND)


# ------------------------------------------------------------------ load


@dataclass(frozen=True, slots=True)
class Loaded:
    user_ids: list[int]
    celebrities: list[tuple[int, int]]  # (user id, followers), most followed first
    follows: int
    imports: dict[str, int]  # source -> imports
    imported_contacts: int
    linked_accounts: int
    seconds: float


def load(store: AppData, users: int, seed: int) -> Loaded:
    started = time.monotonic()
    spec = GraphSpec(users=users, boards=0, pins=0, follows_per_user=10.0, board_follows_per_user=0.0,
                     celebrities=3, celebrity_followers=max(1, users // 5), seed=seed)
    plan: GraphPlan = generate.plan(spec, store.shard_map.shards)
    summary = generate.write(store, plan)
    ids = summary.user_ids
    rng = random.Random(f"imports:{seed}")
    # A tenth of the users linked an email to their account; address books
    # list some of them (by their own name, sometimes just the first name).
    linked = rng.sample(range(users), max(1, users // 10))
    for i in linked:
        contacts.link_account(store, f"email:user{i}@example.com", ids[i])
    imports = {"address_book": 0, "social": 0}
    imported = 0
    for i in rng.sample(range(users), max(1, users // 10)):
        book = []
        for _ in range(rng.randint(5, 40)):
            if rng.random() < 0.3:
                friend = rng.choice(linked)
                name = plan.user_names[friend] if rng.random() < 0.8 else plan.user_names[friend].split()[0]
                book.append({"name": name, "email": f"user{friend}@example.com"})
            else:
                book.append({"name": person_name(rng), "email": f"c{rng.randrange(10**9)}@mail.example"})
        imported += len(contacts.put_source(store, ids[i], "address_book", book).contacts)
        imports["address_book"] += 1
    for i in rng.sample(range(users), max(1, users // 20)):
        friends = [{"name": person_name(rng), "external_id": str(rng.randrange(10**12))}
                   for _ in range(rng.randint(5, 30))]
        imported += len(contacts.put_source(store, ids[i], "social", friends).contacts)
        imports["social"] += 1
    celebrities = [(user, n) for user, n in summary.top_accounts if user in set(summary.celebrity_ids)]
    return Loaded(ids, celebrities, summary.user_follows, imports, imported, len(linked),
                  time.monotonic() - started)


def pages_of(user_ids: Sequence[int]) -> list[list[int]]:
    """Pages of up to PAGE consecutive users (by local id) of one shard."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for user in user_ids:
        by_shard[split_id(user).shard].append(user)
    pages: list[list[int]] = []
    for shard in sorted(by_shard):
        users = sorted(by_shard[shard], key=lambda u: split_id(u).local)
        pages.extend(users[i:i + PAGE] for i in range(0, len(users), PAGE))
    return pages


# ------------------------------------------------------------------ lookups


class _Timings(threading.local):
    """What the last lookup of this thread spent where."""

    def __init__(self) -> None:
        self.hbase_s = 0.0
        self.candidates_s = 0.0
        self.candidates = 0


_timings = _Timings()
_original_wide = index_module.wide_candidates
_original_tall = index_module.tall_candidates
_original_second = second.candidates
_original_scan_range = index_module.scan_rows  # type: ignore[attr-defined]
_original_get_rows = second.get_rows  # type: ignore[attr-defined]


def _hbase_timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _timings.hbase_s += time.perf_counter() - started

    return timed


def _timed_wide(*args: Any, **kwargs: Any) -> Any:
    """The first step of every lookup: the thread's timings start here."""
    _timings.hbase_s = _timings.candidates_s = 0.0
    _timings.candidates = 0
    return _timed_tall(*args, _fn=_original_wide, **kwargs)


def _timed_tall(*args: Any, _fn: Any = None, **kwargs: Any) -> Any:
    started = time.perf_counter()
    found = (_fn or _original_tall)(*args, **kwargs)
    _timings.candidates_s += time.perf_counter() - started
    _timings.candidates += len(found)
    return found


@dataclass(frozen=True, slots=True)
class Answer:
    service_s: float  # lookup() from call to return
    hbase_s: float  # inside scan_rows and second_degree's get_rows: the Thrift calls
    decode_s: float  # the rest of wide/tall/second_candidates(): splitting keys, decoding JSON cells
    rank_s: float  # the rest of lookup(): tokenize, match_score per candidate, sort
    candidates: int
    matches: int
    served_by: str
    second_degree: bool  # a match was found in second_degree




def make_queries(store: AppData, users: Sequence[int], count: int, rng: random.Random) -> list[Query]:
    """Prefixes a person would type for a contact they have: 1-4 letters of
    the first name, in a third of queries followed by 1-2 of the last name;
    SECOND_SHARE of them of a second_degree contact's name."""
    names: dict[int, list[str]] = {}
    seconds: dict[int, list[str]] = {}
    for start in range(0, len(users), PAGE):
        part = list(users[start:start + PAGE])
        for owner, entries in truth.entries_of_owners(store, part).items():
            if entries:
                names[owner] = [e.name for e in entries]
        seconds.update(second_names(store, part))
    if not names:
        raise SystemExit("bench/typeahead.py: no sampled user has any contact")
    owners, second_owners = sorted(names), sorted(seconds)
    queries = []
    for _ in range(count):
        pick = seconds if second_owners and rng.random() < SECOND_SHARE else names
        owner = rng.choice(second_owners if pick is seconds else owners)
        words = rng.choice(pick[owner]).split()
        query = words[0][: rng.randint(1, 4)]
        if len(words) > 1 and rng.random() < 1 / 3:
            query += " " + words[-1][: rng.randint(1, 2)]
        queries.append((owner, query))
    return queries


def _shape(query: str) -> str:
    tokens = tokenize(query)
    if len(tokens) > 1:
        return "two tokens"
    return "1 letter" if len(tokens[0]) == 1 else "2-4 letters"


def lookup_phase(index: ContactsIndex, queries: list[Query], rate: float, threads: int) -> dict[str, Any]:
    def ask(query: Query) -> Answer:
        started = time.perf_counter()
        result = index.lookup(query[0], query[1], 10)
        service = time.perf_counter() - started
        t = _timings
        return Answer(service, t.hbase_s, t.candidates_s - t.hbase_s, service - t.candidates_s, t.candidates,
                      len(result.matches), result.served_by, shows_second(m.sources for m in result.matches))

    cpu, wall, before = time.process_time(), time.perf_counter(), cpu_snapshot()
    with own_collections() as collections:
        run = open_loop(ask, queries, rate, threads)
    cpu, wall, cpu_s = time.process_time() - cpu, time.perf_counter() - wall, cpu_spent(before, cpu_snapshot())
    answers = [(query, latency, answer) for query, latency, answer in run.answered]
    latencies = [latency for _q, latency, _a in answers]
    served: dict[str, int] = defaultdict(int)
    for _q, _latency, answer in answers:
        served[answer.served_by] += 1
    shapes: dict[str, Any] = {}
    for shape in ("1 letter", "2-4 letters", "two tokens"):
        picked = [(lat, a) for q, lat, a in answers if _shape(q[1]) == shape]
        if picked:
            shapes[shape] = {
                "requests": len(picked), **summary([lat for lat, _a in picked]),
                "mean_candidates": statistics.fmean(a.candidates for _lat, a in picked),
            }
    cand = sorted(a.candidates for _q, _l, a in answers)
    return {
        "requests": run.requests, "answered": len(answers), "errors": run.errors, "served_by": dict(served),
        **summary(latencies),
        "over_target_share": sum(lat * 1000 > TARGET_P99_MS for lat in latencies) / max(1, len(latencies)),
        "service": summary([a.service_s for _q, _l, a in answers]),
        "queued": summary([lat - a.service_s for _q, lat, a in answers]),
        "hbase": summary([a.hbase_s for _q, _l, a in answers]),
        "decode": summary([a.decode_s for _q, _l, a in answers]),
        "rank": summary([a.rank_s for _q, _l, a in answers]),
        "candidates": {"median": cand[len(cand) // 2] if cand else 0,
                       "p99": cand[min(len(cand) - 1, int(0.99 * len(cand)))] if cand else 0,
                       "max": cand[-1] if cand else 0},
        "empty_answers": sum(a.matches == 0 for _q, _l, a in answers),
        "second_degree_hits": sum(a.second_degree for _q, _l, a in answers),
        "by_shape": shapes,
        "client_cpu_share": cpu / wall,  # of one core: near 1.0, the GIL is the limit
        "cpu_s": cpu_s,  # the machine's and each kind of server's, over the phase
        "late_submit_ms": run.late_start_s * 1000,
        "client_gc": collections,  # this process's own collections (gc_pauses: the region server's)
    }


def settle_tables(admin: HBaseAdmin) -> float:
    """Flush and major-compact the index's tables on the primary (what HBase
    does by itself some time after a bulk load): lookups measured after it
    see the index as it settles, not the store files of the load."""
    started = time.perf_counter()
    prefix = HBaseSettings.from_env().table_prefix
    for table in INDEX_TABLES:
        admin.major_compact(f"{prefix}_{table.name}" if prefix else table.name)
    return time.perf_counter() - started


def empty_index(pool: ClusterPool) -> float:
    """The index's tables dropped and made again on the primary: each of the
    backfill's writers starts on an empty index, as the initial upload does
    (a writer that followed another would otherwise read and overwrite the
    cells that one left, and pay for its flushes and compactions)."""
    started = time.perf_counter()
    for table in INDEX_TABLES:
        drop_table(pool, table.name)
        ensure_table(pool, table)
    return time.perf_counter() - started


def _phases(index: ContactsIndex, args: argparse.Namespace, users: list[Query], famous: list[Query],
            celebrity: tuple[int, int]) -> dict[str, Any]:
    return {
        "users": with_gc(lambda: lookup_phase(index, users, args.rate, args.threads)),
        "celebrity": {"user_id": celebrity[0], "followers": celebrity[1],
                      **with_gc(lambda: lookup_phase(index, famous, args.rate, args.threads))},
    }


def lookup_bench(args: argparse.Namespace, store: AppData, loaded: Loaded, pages: list[list[int]],
                 admin: HBaseAdmin) -> dict[str, Any]:
    """Lookups once the index is settled (the published figures), then again
    while the index is rebuilt beside them: as a backfill runs, through its
    PinLater queue with that queue's cap and rate (``during_backfill``),
    and as fast as one process rebuilds it (``during_unlimited_backfill``)."""
    rng = random.Random(f"lookups:{args.seed}")
    hbase = HBaseSettings.from_env()
    total = int(args.rate * args.seconds)
    sample = rng.sample(loaded.user_ids, min(len(loaded.user_ids), 2000))
    users = make_queries(store, sample, total, rng)
    famous = make_queries(store, [loaded.celebrities[0][0]], total, rng)
    settle_s = settle_tables(admin)
    # The lookups' process collects as a process serving them does (the
    # Contacts Service's and the HTTP endpoint's, workers.gc_policy). With
    # Python's defaults, the phases that met a full collection of this
    # process had it stop every lookup thread for 60-100 ms.
    tune_gc()
    index_module.wide_candidates = _timed_wide
    index_module.tall_candidates = _timed_tall
    index_module.second_candidates = functools.partial(_timed_tall, _fn=_original_second)  # type: ignore[attr-defined]
    index_module.scan_rows = _hbase_timed(_original_scan_range)  # type: ignore[attr-defined]  # from tasks.hbase.reads
    second.get_rows = _hbase_timed(_original_get_rows)  # type: ignore[attr-defined]
    ctx = multiprocessing.get_context("fork")
    # Both forked before any lookup thread starts.
    with ctx.Pool(args.backfill_workers, initializer=init_worker) as workers, \
            ctx.Pool(1, initializer=init_worker) as unlimited:
        pair = ClusterPair.from_settings(dataclasses.replace(hbase, pool_size=args.threads, call_timeout_s=5.0))
        # The primary's answers however late (the standby holds no index).
        index = ContactsIndex(pair, TypeaheadSettings(standby_after_ms=0))
        try:
            # Warm the pools and the clusters' JIT on both kinds of lookups: a
            # celebrity's tall scans and two-token filters run code the users' do not.
            lookup_phase(index, warm_up(users, famous), args.rate, args.threads)
            idle = idle_cpu(args.seconds)  # the baseline of a phase's cpu_s: the same span, no lookups
            result = {
                "idle_cpu_s": idle,
                "rate_per_s": args.rate, "seconds": args.seconds, "threads": args.threads, "limit": 10,
                "tall_scan_limit": index.settings.tall_scan_limit, "settle_s": settle_s,
                "service_processes": LOOKUP_SERVICE_PROCESSES,
                **_phases(index, args, users, famous, loaded.celebrities[0]),
            }
            result["served"] = served_bench(args, users, famous)

            def phases() -> dict[str, Any]:
                return _phases(index, args, users, famous, loaded.celebrities[0])

            result["during_backfill"] = through_jobs(workers, pages, args.backfill_workers, phases)
            rebuilding = unlimited.map_async(rebuild_page, pages, chunksize=1)
            result["during_unlimited_backfill"] = {"processes": 1, **phases()}
            result["during_unlimited_backfill"]["backfill_still_running"] = not rebuilding.ready()
        finally:
            index_module.wide_candidates = _original_wide
            index_module.tall_candidates = _original_tall
            index_module.second_candidates = _original_second  # type: ignore[attr-defined]
            index_module.scan_rows = _original_scan_range  # type: ignore[attr-defined]
            second.get_rows = _original_get_rows  # type: ignore[attr-defined]
            index.close()
            unlimited.terminate()
    return result


# ------------------------------------------------------------------ main


def reset_index(store: AppData, pair: ClusterPair, create: bool) -> None:
    """Drops (and with ``create`` makes again) the databases and the primary's
    tables: the benchmark never touches the standby."""
    schema.drop_shards(store)
    for table in INDEX_TABLES:
        drop_table(pair.primary, table.name)
    if create:
        schema.create_shards(store)
        for table in INDEX_TABLES:
            ensure_table(pair.primary, table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2, help="backfill processes (as Celery workers would)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0, help="lookups per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="per lookup phase")
    parser.add_argument("--threads", type=int, default=16, help="lookup threads (and HBase connections)")
    parser.add_argument("--backfill-workers", type=int, default=2,
                        help="processes running the backfill queue's jobs beside the lookups")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="small and quick")
    parser.add_argument("--lookups-only", action="store_true",
                        help="no backfill benchmark: the index is built once, then the lookup phases")
    parser.add_argument("--keep", action="store_true", help="keep the databases and tables after the run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warn_of_quick_jit()
    if args.smoke:
        args.users, args.rounds, args.rate, args.seconds = 600, 1, 100.0, 1.5

    os.environ.update(BENCH_ENV)
    store = AppData.from_env()
    pair = ClusterPair.from_settings()
    admin = HBaseAdmin("primary")
    reset_index(store, pair, create=True)
    try:
        loaded = load(store, args.users, args.seed)
        fill: dict[str, Any] | None
        if args.lookups_only:
            fill = None
            print(f"index built in {build_index(pages_of(loaded.user_ids), args.processes):.1f} s", flush=True)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-typeahead-") as workdir:
                fill = backfill_bench(pages_of(loaded.user_ids), args.processes, args.rounds, Path(workdir),
                                      functools.partial(empty_index, pair.primary))
        second_fill = second_backfill(pages_of(loaded.user_ids), args.processes, pair.primary)
        look = lookup_bench(args, store, loaded, pages_of(loaded.user_ids), admin)
        result = {
            "load": {"users": len(loaded.user_ids), "follows": loaded.follows, "celebrities": loaded.celebrities,
                     "imports": loaded.imports, "imported_contacts": loaded.imported_contacts,
                     "linked_accounts": loaded.linked_accounts, "seconds": loaded.seconds,
                     "sources": [s.name for s in SOURCES]},
            "backfill": fill,
            "second_degree_backfill": second_fill,
            "lookups": look,
            "through_jobs": None,
        }
        report(result)
        write_json(args.json, result)
    finally:
        if not args.keep:
            reset_index(store, pair, create=False)
        admin.close()
        store.close()
        pair.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
