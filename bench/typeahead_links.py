"""How fast a link or unlink of an external account reaches the index
entries of every import naming it, against the ceiling of settling those
imports whole, and what the id lookups' cache saves a rebuild.

Load: ``--importers`` users, each with an address book of ``--contacts``
contacts, one of them the same email (the account linked and unlinked),
their index built on the primary.

* ``source_jobs``: each importer's import settled as its own import job
  would (``sync.source_changed``), one after another: the work a link
  cost before the fix-up existed (every importer importing again).
* ``fixup``: the account linked to a user, then unlinked, each followed by
  its fix-up chain (``sync.account_page`` a page at a time, the
  ``PINLATER_TYPEAHEAD_ACCOUNT_PAGE`` default), in this process; then the
  same through a Contacts Service (``accountChanged``) in a thread of this
  process. After each, every importer's entry is checked to carry the
  user (or none).
* ``rebuild``: the importers' whole index rebuilt (``sync.rebuild``, pages
  of 500) without a cache of id lookups, and with one a rebuild warmed
  (its best case: every first read's lookups are hits); the cache's
  effect is the first read of each page alone (the check after writing
  asks MySQL either way).

Rounds alternate which path goes first; medians are reported, and each
ratio is a path's importers per second over ``source_jobs``'.

    python bench/typeahead_links.py              # 2,000 importers, 50 contacts each, 3 rounds
    python bench/typeahead_links.py --smoke      # small and quick (CI)
    python bench/typeahead_links.py --json out.json

Uses the local servers of ``scripts/services`` with its own app-data
databases (``appdata_benchtl_``) and HBase tables (prefix ``benchtl``),
made fresh each run and dropped at its end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_json
from bench.support import warn_of_quick_jit
from bench.typeahead import reset_index
from tasks.appdata import contacts, graph
from tasks.appdata.accountcache import AccountCache
from tasks.appdata.store import AppData
from tasks.hbase import PRIMARY, ClusterPair, ClusterPool
from tasks.hbase.settings import Address
from tasks.typeahead import sync
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.jobs import UpdateJob
from tasks.typeahead.runtime import TypeaheadRuntime
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import ADDRESS_BOOK
from tasks.typeahead.updates import ServiceUpdates

BENCH_ENV = {
    "PINLATER_APPDATA_DATABASE_PREFIX": "appdata_benchtl_",
    "PINLATER_HBASE_TABLE_PREFIX": "benchtl",
    # Only the primary holds the index here: a slow lookup must not be
    # answered by the standby's empty tables.
    "PINLATER_TYPEAHEAD_STANDBY_AFTER_MS": "0",
}
PAGE = 500


def load(store: AppData, pool: ClusterPool, importers: int, per_import: int) -> tuple[list[int], str, int]:
    """The importers (their index built) and the account they all name, and its user."""
    shards = sorted(store.shard_map.shards)
    tag = uuid.uuid4().hex[:8]
    email = f"shared.{tag}@example.com"
    owner = graph.create_user(store, {"name": "Sam Shared"}, shard=shards[0]).id
    owners = []
    for i in range(importers):
        user = graph.create_user(store, {"name": f"Importer {i}"}, shard=shards[i % len(shards)]).id
        book = [{"name": "Sam from work", "email": email}]
        book += [{"name": f"Contact {i} {j}", "email": f"c{i}.{j}.{tag}@example.com"} for j in range(per_import - 1)]
        contacts.put_source(store, user, "address_book", book)
        owners.append(user)
    owners.sort()
    for start in range(0, len(owners), PAGE):
        sync.rebuild(store, pool, owners[start : start + PAGE])
    return owners, f"email:{email}", owner


def fixup_chain(account_page: Callable[[UpdateJob], sync.AccountStep], account: str) -> int:
    job: UpdateJob | None = UpdateJob.account(PRIMARY, account, uuid.uuid4().hex)
    entries = 0
    while job is not None:
        step = account_page(job)
        entries += step.entries
        job = step.next_job
    return entries


def check(index: ContactsIndex, owners: list[int], user: int | None, sample: int = 50) -> None:
    """The shared contact carries ``user`` in the importers' indexes (a spread sample of them)."""
    for owner in owners[:: max(1, len(owners) // sample)]:
        found = [m.contact.user_id for m in index.lookup(owner, "sam").matches]
        if found != [user]:
            raise SystemExit(f"importer {owner}'s shared contact is {found}, not user {user}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--importers", type=int, default=2000)
    parser.add_argument("--contacts", type=int, default=50, help="contacts per address book")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="small and quick")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warn_of_quick_jit()
    if args.smoke:
        args.importers, args.contacts, args.rounds = 120, 10, 1
    os.environ.update(BENCH_ENV)
    store = AppData.from_env()
    pair = ClusterPair.from_settings()
    pool = pair.primary
    settings = TypeaheadSettings.from_env()
    reset_index(store, pair, create=True)
    server = None
    try:
        started = time.perf_counter()
        owners, account, user = load(store, pool, args.importers, args.contacts)
        print(f"{len(owners)} importers of {args.contacts} contacts loaded and indexed in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        index = ContactsIndex(pair, settings)
        runtime = TypeaheadRuntime(settings, store, pair)
        server = ContactsServer(index.lookup, "127.0.0.1", 0, writer=runtime).start()
        remote = ServiceUpdates(Address("127.0.0.1", server.port))
        local_cache = AccountCache(capacity=0)
        warm = AccountCache()
        times: dict[str, list[float]] = {"source_jobs": [], "fixup": [], "fixup_service": [],
                                         "rebuild": [], "rebuild_cached": []}
        cells: dict[str, list[int]] = {k: [] for k in times}

        def source_jobs() -> int:
            return sum(sync.source_changed(store, pool, owner, ADDRESS_BOOK) for owner in owners)

        def link_both(page: Callable[[UpdateJob], sync.AccountStep]) -> int:
            contacts.link_account(store, account, user)
            written = fixup_chain(page, account)
            check(index, owners, user)
            contacts.unlink_account(store, account)
            written += fixup_chain(page, account)
            check(index, owners, None)
            return written

        def rebuild(cache: AccountCache | None) -> int:
            return sum(sync.rebuild(store, pool, owners[s : s + PAGE], cache) for s in range(0, len(owners), PAGE))

        paths: dict[str, tuple[Callable[[], int], int]] = {
            # (work, importer settlings it makes: a fix-up run links, then unlinks)
            "source_jobs": (source_jobs, 1),
            "fixup": (lambda: link_both(
                lambda job: sync.account_page(store, pool, job, settings.account_page, local_cache)), 2),
            "fixup_service": (lambda: link_both(remote.account_page), 2),
            "rebuild": (lambda: rebuild(None), 1),
            "rebuild_cached": (lambda: rebuild(warm), 1),
        }
        rebuild(warm)
        for r in range(args.rounds):
            names = list(paths)
            names = names[r % len(names):] + names[: r % len(names)]
            for name in names:
                work, _times = paths[name]
                t0 = time.perf_counter()
                cells[name].append(work())
                times[name].append(time.perf_counter() - t0)
        rates = {name: paths[name][1] * len(owners) / statistics.median(times[name]) for name in paths}
        result: dict[str, Any] = {
            "importers": len(owners), "contacts_per_import": args.contacts, "rounds": args.rounds,
            "account_page": settings.account_page,
            "seconds": times, "cells_written": cells,
            **{f"{name}_importers_per_s": round(rate, 1) for name, rate in rates.items()},
            "ratio_fixup": round(rates["fixup"] / rates["source_jobs"], 2),
            "ratio_fixup_service": round(rates["fixup_service"] / rates["source_jobs"], 2),
            "ratio_rebuild_cached": round(rates["rebuild_cached"] / rates["rebuild"], 2),
            "service_calls": server.stats.snapshot()["methods"],
        }
        for name, rate in rates.items():
            print(f"{name:>15}: {rate:8.1f} importers/s  (median of {len(times[name])}: "
                  f"{statistics.median(times[name]):.2f} s)")
        print(f"ratio (fix-up / settling each import whole): {result['ratio_fixup']}, "
              f"through the Contacts Service: {result['ratio_fixup_service']}")
        print(f"ratio (rebuild with the id lookups' cache / without): {result['ratio_rebuild_cached']}")
        write_json(args.json, result)
    finally:
        if server is not None:
            server.stop(grace_s=2)
        reset_index(store, pair, create=False)
        store.close()
        pair.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
