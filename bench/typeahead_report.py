"""The printed report of bench/typeahead.py: the load, the backfill
writers, the second_degree backfill and the lookup phases, each against
its target (the JSON is the record; this is what a person reads)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.typeahead_second import report_second_backfill

TARGET_P99_MS = 25.0  # Pinterest's typeahead's server-side p99
TARGET_CELEBRITY_P99_MS = 50.0  # the most-followed account, whose rows are the largest


def _ms(value: float) -> str:
    return f"{value:7.1f}"


def report(result: dict[str, Any]) -> None:
    load_, fill, look = result["load"], result["backfill"], result["lookups"]
    print(f"load: {load_['users']:,} users, {load_['follows']:,} follows, celebrities "
          + ", ".join(f"{n:,} followers" for _u, n in load_["celebrities"])
          + f"; imports {load_['imports']} ({load_['imported_contacts']:,} contacts), "
          f"{load_['linked_accounts']:,} linked emails; {load_['seconds']:.0f} s")
    if fill is not None:
        report_backfill(fill)
    report_second_backfill(result["second_degree_backfill"])
    report_lookups(look)


def report_backfill(fill: dict[str, Any]) -> None:
    print(f"backfill (primary cluster only): {fill['users']:,} users in {fill['pages']} pages of "
          f"{fill['page_size']}, {fill['entries']:,} entries = {fill['cells']:,} cells in "
          f"{fill['put_calls']:,} put calls ({fill['put_calls'] / fill['pages']:,.0f} per page), "
          f"{fill['processes']} processes, {fill['rounds']} round(s); each run on an empty index "
          f"(its tables made again before it, {statistics.mean(fill['settle_s']):.0f} s each)")
    print(f"  sync.rebuild:          {fill['rebuild_users_per_s']:9,.0f} users/s {fill['rebuild_cells_per_s']:9,.0f} "
          f"cells/s  (rounds {', '.join(f'{s:.1f}' for s in fill['rebuild_s'])} s)")
    print(f"  raw happybase batches: {fill['raw_users_per_s']:9,.0f} users/s {fill['raw_cells_per_s']:9,.0f} "
          f"cells/s  (rounds {', '.join(f'{s:.1f}' for s in fill['raw_s'])} s)")
    rounds2 = ", ".join(f"{s:.1f}" for s in fill["raw_thrift2_s"])
    print(f"  raw Thrift2 putMultiple: {fill['raw_thrift2_users_per_s']:7,.0f} users/s "
          f"{fill['raw_thrift2_cells_per_s']:9,.0f} cells/s  (rounds {rounds2} s)")
    rounds3 = ", ".join(f"{s:.1f}" for s in fill["raw_encoded_s"])
    print(f"  raw put_versions:        {fill['raw_encoded_users_per_s']:7,.0f} users/s "
          f"{fill['raw_encoded_cells_per_s']:9,.0f} cells/s  (rounds {rounds3} s; the rebuild's own writes, "
          f"nothing read: ratio {fill['ratio_encoded']:.2f})")
    rounds4 = ", ".join(f"{s:.1f}" for s in fill["rebuild_service_s"])
    print(f"  rebuild via the Contacts Service ({fill['service_processes']} processes): "
          f"{fill['rebuild_service_users_per_s']:7,.0f} users/s  (rounds "
          f"{rounds4} s; ratio to the rebuild in the backfill's processes {fill['ratio_service']:.2f}, target 0.8)")
    print(f"  ratio (rebuild / raw happybase): {fill['ratio']:.2f}; "
          f"(rebuild / raw Thrift2): {fill['ratio_thrift2']:.2f}")
    print("  CPU ms a user (the machine's, then by process kind; clients = the writer's own processes):")
    for name, spent in fill["cpu_ms_per_user"].items():
        print(f"    {name:12} " + ", ".join(f"{kind} {value:.2f}" for kind, value in spent.items()))


def _own_gc(collections: dict[str, float] | None) -> str:
    """The lookups' process's own collections in a phase (runs before they were recorded: nothing)."""
    if not collections:
        return ""
    return f"own gc {collections['count']} ({collections['full']} full), max {collections['max_ms']:.0f} ms; "


def report_lookups(look: dict[str, Any]) -> None:
    print(f"lookups: {look['rate_per_s']:.0f}/s for {look['seconds']:.0f} s per phase, {look['threads']} threads, "
          f"limit {look['limit']}, tall scan limit {look['tall_scan_limit']}; ms from the scheduled time")
    print("  phase       answered   p50     p90     p99     max  >25ms | service p99  hbase p99  decode p99  "
          "rank p99 | candidates med/p99/max  cpu")
    queued, fill_ = look["during_backfill"], look["during_backfill"]["backfill"]
    print(f"  (settled: the tables flushed and major-compacted first, {look['settle_s']:.0f} s; then +bf beside "
          f"a backfill through its queue, {queued['processes']} processes under the queue's cap of "
          f"{fill_['max_running']} and {fill_['max_dequeue_rate']:g} pages/s at nice {fill_.get('niceness', 0)}: "
          f"{fill_['pages']} pages, "
          f"{fill_['users_per_s']:,.0f} users/s; then +bf! beside one process rebuilding as fast as it can)")
    for name, p in (("users", look["users"]), ("celebrity", look["celebrity"]),
                    ("users+bf", queued["users"]), ("celeb+bf", queued["celebrity"]),
                    ("users+bf!", look["during_unlimited_backfill"]["users"]),
                    ("celeb+bf!", look["during_unlimited_backfill"]["celebrity"])):
        print(f"  {name:10} {p['answered']:6,}/{p['requests']:<6,} {_ms(p['p50_ms'])} {_ms(p['p90_ms'])} "
              f"{_ms(p['p99_ms'])} {_ms(p['max_ms'])} {p['over_target_share']:5.1%} |"
              f"  {_ms(p['service']['p99_ms'])}    {_ms(p['hbase']['p99_ms'])}    {_ms(p['decode']['p99_ms'])}  "
              f"{_ms(p['rank']['p99_ms'])} | {p['candidates']['median']:5} /{p['candidates']['p99']:5} "
              f"/{p['candidates']['max']:5}     {p['client_cpu_share']:.2f}  "
              f"gc {p['gc_pauses']['count']} pauses, max {p['gc_pauses']['max_ms']:.0f} ms; "
              f"{_own_gc(p.get('client_gc'))}"
              f"second_degree in {p['second_degree_hits']}")
        for shape, s in p["by_shape"].items():
            print(f"    {shape:12} {s['requests']:6,}  p50 {_ms(s['p50_ms'])}  p99 {_ms(s['p99_ms'])}  "
                  f"mean candidates {s['mean_candidates']:7.1f}")
    print("  through a server of its own (settled; ms from the scheduled time, as a client sees them):")
    for kind, label in (("thrift", f"Contacts Service (Thrift, {look['service_processes']} proc.)"),
                        ("http", "HTTP endpoint (1 proc.)")):
        for who, p in look["served"][kind].items():
            print(f"    {label:33} {who:10} {p['answered']:6,}/{p['requests']:<6,} p50 {_ms(p['p50_ms'])} "
                  f"p99 {_ms(p['p99_ms'])} max {_ms(p['max_ms'])} errors {p['errors']}, "
                  f"second_degree in {p['second_degree_hits']}")
    thrift = look["served"]["thrift"]
    verdict = ("met" if thrift["users"]["p99_ms"] <= TARGET_P99_MS
               and thrift["celebrity"]["p99_ms"] <= TARGET_CELEBRITY_P99_MS else "MISSED")
    print(f"target through the Contacts Service: p99 <= {TARGET_P99_MS:.0f} ms for users, "
          f"{TARGET_CELEBRITY_P99_MS:.0f} ms for the celebrity: {verdict} ({thrift['users']['p99_ms']:.1f} ms, "
          f"{thrift['celebrity']['p99_ms']:.1f} ms)")
    p99 = look["users"]["p99_ms"]
    verdict = "met" if p99 <= TARGET_P99_MS else "MISSED"
    print(f"target: p99 <= {TARGET_P99_MS:.0f} ms for users' lookups: {verdict} ({p99:.1f} ms); "
          f"celebrity {look['celebrity']['p99_ms']:.1f} ms")
    users_bf, celeb_bf = queued["users"]["p99_ms"], queued["celebrity"]["p99_ms"]
    verdict = "met" if users_bf <= TARGET_P99_MS and celeb_bf <= TARGET_CELEBRITY_P99_MS else "MISSED"
    print(f"target beside a backfill through its queue: p99 <= {TARGET_P99_MS:.0f} ms for users, "
          f"{TARGET_CELEBRITY_P99_MS:.0f} ms for the celebrity: {verdict} ({users_bf:.1f} ms, {celeb_bf:.1f} ms)")
