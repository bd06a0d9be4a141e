"""The lookups of bench/typeahead.py through the servers a client would
call, each a process of its own started as the Procfile starts it (the
Contacts Service over Thrift and the HTTP endpoint), and the phase
summaries both kinds of lookup phase share."""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from bench.support import cpu_snapshot, cpu_spent, gc_pauses, open_loop, percentile_ms
from bench.typeahead_backfill import serving
from bench.typeahead_report import TARGET_P99_MS
from bench.typeahead_second import shows_second
from tasks.typeahead.service import idl as contacts_idl
from tasks.typeahead.wire import connect as contacts_connect

Query = tuple[int, str]  # an owner and the prefix typed

# The Contacts Service answers the lookups from one process: with HBase on
# the same 2 cores, a second process let Python take both and the clusters'
# threads wait (users' p99 through 2 processes 27-124 ms in 4 runs, through
# 1 process 12-48 ms in 6).
LOOKUP_SERVICE_PROCESSES = 1


def summary(values_s: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": percentile_ms(values_s, 0.5), "p90_ms": percentile_ms(values_s, 0.9),
            "p99_ms": percentile_ms(values_s, 0.99), "max_ms": percentile_ms(values_s, 1.0)}


def with_gc(phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A lookup phase and the primary region server's GC pauses during it."""
    started = time.time()
    result = phase()
    return {**result, "gc_pauses": gc_pauses("primary", started, time.time())}


Served = tuple[int, bool]  # a served lookup's matches and whether one was found in second_degree


def thrift_asker(port: int) -> Callable[[Query], Served]:
    """One Contacts Service client per thread."""
    local = threading.local()

    def ask(query: Query) -> Served:
        c = getattr(local, "client", None)
        if c is None:
            c = local.client = contacts_connect("127.0.0.1", port, timeout_ms=10_000)
        matches = c.lookup(contacts_idl.LookupRequest(owner=query[0], query=query[1], limit=10)).matches
        return len(matches), shows_second(m.sources for m in matches)

    return ask


def http_asker(port: int) -> Callable[[Query], Served]:
    """One kept-alive HTTP connection per thread."""
    local = threading.local()

    def ask(query: Query) -> Served:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", f"/v1/typeahead/{query[0]}?q={quote(query[1])}&limit=10")
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"HTTP {answer.status}: {body[:200]!r}")
        results = json.loads(body)["results"]
        return len(results), shows_second(r["sources"] for r in results)

    return ask


def warm_up(users: list[Query], famous: list[Query]) -> list[Query]:
    """A quarter of each phase's queries, interleaved: what runs before the
    measured phases so that neither pays for first calls."""
    quarter = max(1, len(users) // 4)
    return [q for pair in zip(users[:quarter], famous[:quarter], strict=False) for q in pair]


def served_phase(ask: Callable[[Query], Served], queries: list[Query], rate: float, threads: int) -> dict[str, Any]:
    """Lookups through a server, timed as ``lookup_phase``'s are (from each
    request's scheduled time): what a client of the server sees."""
    before = cpu_snapshot()
    run = open_loop(ask, queries, rate, threads)
    latencies = [latency for _q, latency, _n in run.answered]
    return {"requests": run.requests, "answered": len(run.answered), "errors": run.errors, **summary(latencies),
            "over_target_share": sum(lat * 1000 > TARGET_P99_MS for lat in latencies) / max(1, len(latencies)),
            "empty_answers": sum(n == 0 for _q, _l, (n, _second) in run.answered),
            "second_degree_hits": sum(hit for _q, _l, (_n, hit) in run.answered),
            "cpu_s": cpu_spent(before, cpu_snapshot()), "late_submit_ms": run.late_start_s * 1000}


def served_bench(args: argparse.Namespace, users: list[Query], famous: list[Query]) -> dict[str, Any]:
    """The settled phases through the Contacts Service and the HTTP endpoint."""
    out: dict[str, Any] = {}
    for name, command, asker in (("thrift", "serve-thrift", thrift_asker), ("http", "serve", http_asker)):
        with serving(command, LOOKUP_SERVICE_PROCESSES if command == "serve-thrift" else 1) as port:
            ask = asker(port)
            served_phase(ask, warm_up(users, famous), args.rate, args.threads)
            out[name] = {who: with_gc(functools.partial(served_phase, ask, queries, args.rate, args.threads))
                         for who, queries in (("users", users), ("celebrity", famous))}
    return out
