"""What the typeahead's settle and rebuild read from HBase, on real HBase:
each wide row's own members only, each owner's member records once, the
entries built again only when what was read again changed, and a page sent
round again by any change between its reads and its writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tasks.appdata import contacts, graph
from tasks.appdata.accountcache import AccountCache
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import PRIMARY, ClusterPair
from tasks.hbase.idl import THRIFT2
from tasks.typeahead import sync, truth, verify, writer
from tasks.typeahead.entries import (
    TALL_TABLE,
    WIDE_TABLE,
    Entry,
    owner_ranges,
    row_prefix,
)
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.jobs import UpdateJob
from tasks.typeahead.sources import ADDRESS_BOOK, FOLLOWERS, FOLLOWING, WIDE, Schema
from tasks.typeahead.truth import owner_places, user_key
from tests.typeahead.helpers import differences, follow, found, users


class _LoggedGets:
    """A Thrift2 client that notes the gets and scans asked of it."""

    def __init__(self, client: Any, asked: list[tuple[str, bytes, list[Any]]]) -> None:
        self.client, self.asked = client, asked

    def __getattr__(self, method: str) -> Any:
        return getattr(self.client, method)

    def getMultiple(self, table: bytes, gets: list[Any]) -> Any:  # noqa: N802 (Thrift's name)
        self.asked.append(("get", table, gets))
        return self.client.getMultiple(table, gets)

    def getScannerResults(self, table: bytes, scan: Any, limit: int) -> Any:  # noqa: N802 (Thrift's name)
        self.asked.append(("scan", table, [scan]))
        return self.client.getScannerResults(table, scan, limit)


def _log_gets(pool: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes, list[Any]]]:
    asked: list[tuple[str, bytes, list[Any]]] = []
    run = pool.thrift2.run

    def logged(op: str, fn: Any, **kw: Any) -> Any:
        return run(op, lambda client: fn(_LoggedGets(client, asked)), **kw)

    monkeypatch.setattr(pool.thrift2, "run", logged)
    return asked


def test_a_settle_reads_each_wide_row_for_its_own_members_only(
    appdata: AppData, pair: ClusterPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle's member read lists, for each wide row, the columns of that
    row's places, not every row's: a union would make the Thrift2 server
    hold rows x columns in one request (it ran out of heap at 500 users)."""
    ann, bob, cat, dan, eve = users(appdata, "Ann Archer", "Bob Baker", "Cat Cole", "Dan Dale", "Eve Ely")
    follow(appdata, pair, ann, bob)
    follow(appdata, pair, ann, cat)
    follow(appdata, pair, dan, eve)
    pool = pair.primary
    wide_table = pool.table_name(WIDE_TABLE).encode()
    asked = _log_gets(pool, monkeypatch)
    writer.settle(appdata, pool, owner_places(appdata, [ann, dan]))
    columns = {get.row: len(get.columns or ()) for kind, table, gets in asked
               if kind == "get" and table == wide_table for get in gets}
    wide = {place[:2] for place in owner_places(appdata, [ann, dan]) if place[1].schema is Schema.WIDE}
    assert columns[row_prefix(ann, FOLLOWING)] == 2
    assert columns[row_prefix(dan, FOLLOWING)] == 1
    assert len(columns) == len(wide)
    assert differences(appdata, pair, [ann, bob, cat, dan, eve]) == {"primary": 0, "standby": 0}


def test_a_rebuild_reads_its_owners_member_records_once_and_repairs_what_they_show(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backfill page reads every member record of its owners in one read
    of their wide rows' member family and one scan of their tall member
    rows, not again place by place, and from that read alone deletes a
    stale name's cells and the places the truth no longer fills (wide and
    tall)."""
    ann, bob, cat, dan, zed = users(appdata, "Ann Archer", "Bob Baker", "Cat Cole", "Dan Dale", "Zed Zulu")
    follow(appdata, pair, ann, bob)
    follow(appdata, pair, cat, ann)
    follow(appdata, pair, dan, ann)
    pool = pair.primary
    old = now_ms() - 60_000  # older than any truth read's clock margin
    writer.put_entries(pool, [
        Entry(ann, FOLLOWING, user_key(bob), "Olaf Oldname", bob, old),
        Entry(ann, FOLLOWING, user_key(zed), "Zed Zulu", zed, old),
        Entry(ann, FOLLOWERS, user_key(zed), "Zed Zulu", zed, old),
    ])
    assert found(index, ann, "olaf") == [("Olaf Oldname", "following")]
    assert found(index, ann, "zed") == [("Zed Zulu", "following")]
    stale = {(d.owner, d.source, d.key) for d in verify.diff(appdata, pool, [ann])}
    assert stale == {(ann, "following", user_key(bob)), (ann, "following", user_key(zed)),
                     (ann, "followers", user_key(zed))}
    wide_table, tall_table = (pool.table_name(t).encode() for t in (WIDE_TABLE, TALL_TABLE))
    asked = _log_gets(pool, monkeypatch)
    sync.rebuild(appdata, pool, [ann, dan])
    wide_gets = [gets for kind, table, gets in asked if kind == "get" and table == wide_table]
    tall = [(kind, scans) for kind, table, scans in asked if table == tall_table]
    assert len(wide_gets) == 1
    assert {get.row for get in wide_gets[0]} == {row_prefix(o, s) for o in (ann, dan) for s in WIDE}
    assert all(get.columns == [THRIFT2.TColumn(family=b"m")] for get in wide_gets[0])
    assert [kind for kind, _scans in tall] == ["scan"] * len(owner_ranges([ann, dan]))  # a range per shard
    assert all(scans[0].columns == [THRIFT2.TColumn(family=b"c", qualifier=b"m")] for _kind, scans in tall)
    assert found(index, ann, "olaf") == []
    assert found(index, ann, "zed") == []
    assert found(index, ann, "bob") == [("Bob Baker", "following")]
    assert {source for _name, source in found(index, ann, "cat")} == {"followers"}
    assert differences(appdata, pair, [ann, bob, cat, dan, zed]) == {"primary": 0, "standby": 0}


def test_a_rebuild_builds_its_entries_again_only_when_what_it_reads_again_changed(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 3 of a page asks whether its owners' records are still those
    step 1 read: unchanged, they are neither read nor built twice; a rename
    landing between the page's read and its writes is seen there, and the
    page goes round again and writes the new name."""
    ann, bob, cat = users(appdata, "Ann Archer", "Bob Baker", "Cat Cole")
    graph.follow_user(appdata, ann, bob)
    graph.follow_user(appdata, cat, ann)
    pool = pair.primary
    built: list[truth.OwnersRecords] = []
    read: list[truth.OwnersRecords] = []
    truth_of, read_owners = truth.truth_of, truth.read_owners

    def counted(records: truth.OwnersRecords) -> truth.OwnersTruth:
        built.append(records)
        return truth_of(records)

    def counted_reads(store: AppData, owners: Any, *resolve: Any) -> truth.OwnersRecords:
        read.append(read_owners(store, owners, *resolve))
        return read[-1]

    monkeypatch.setattr(truth, "truth_of", counted)
    monkeypatch.setattr(truth, "read_owners", counted_reads)
    sync.rebuild(appdata, pool, [ann, cat])
    assert len(built) == 1 and len(read) == 1
    assert found(index, ann, "bob") == [("Bob Baker", "following")]

    apply = writer._apply
    renamed: list[int] = []

    def rename_first(*args: Any) -> int:
        if not renamed:
            renamed.append(graph.rename_user(appdata, bob, "Rob Roe")[2])
        return apply(*args)

    monkeypatch.setattr(writer, "_apply", rename_first)
    built.clear()
    read.clear()
    sync.rebuild(appdata, pool, [ann, cat])
    assert renamed and len(built) == 2 and len(read) > 1  # step 1, then step 3 found the rename
    assert found(index, ann, "rob") == [("Rob Roe", "following")]
    assert found(index, ann, "bob") == []
    assert verify.diff(appdata, pool, [ann, cat]) == []


CHANGES = ["rename", "follow", "unfollow", "follow back", "import", "account"]


@pytest.mark.parametrize("change", CHANGES)
def test_every_kind_of_change_between_a_pages_read_and_its_writes_sends_it_round_again(
    appdata: AppData, pair: ClusterPair, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Whatever record of a page's owners changes after step 1 read it (a
    contact's name, a follow either way, an import, the account an imported
    contact resolves to), step 3 sees it and the page's places end as the
    truth says; with no change, step 3 never reads the records whole. (A
    new follow's places are new to the page: its own job settles them, as
    the app enqueues one with every follow.)"""
    ann, bob, cat, dee = users(appdata, "Ann Archer", "Bob Baker", "Cat Cole", "Dee Dunn")
    graph.follow_user(appdata, ann, bob)
    graph.follow_user(appdata, cat, ann)
    book = [{"name": "Eve Ellis", "email": "eve@example.com"}, {"name": "Dee at work", "email": "dee@example.com"}]
    contacts.put_source(appdata, ann, "address_book", book, at_ms=now_ms())
    pool = pair.primary
    changes: dict[str, Callable[[], object]] = {
        "rename": lambda: graph.rename_user(appdata, bob, "Rob Roe"),
        "follow": lambda: graph.follow_user(appdata, ann, dee),
        "unfollow": lambda: graph.unfollow_user(appdata, ann, bob),
        "follow back": lambda: graph.follow_user(appdata, ann, cat),
        "import": lambda: contacts.put_source(appdata, ann, "address_book", book[:1], at_ms=now_ms() + 1),
        "account": lambda: contacts.link_account(appdata, "email:dee@example.com", dee),
    }
    read: list[truth.OwnersRecords] = []
    read_owners, apply = truth.read_owners, writer._apply

    def counted_reads(store: AppData, owners: Any, *resolve: Any) -> truth.OwnersRecords:
        read.append(read_owners(store, owners, *resolve))
        return read[-1]

    def change_first(*args: Any) -> int:
        if len(read) == 1 and change not in done:
            done.append(change)
            changes[change]()
        return apply(*args)

    done: list[str] = []
    monkeypatch.setattr(truth, "read_owners", counted_reads)
    monkeypatch.setattr(writer, "_apply", change_first)
    sync.rebuild(appdata, pool, [ann, cat, dee])
    assert done == [change] and len(read) > 1  # step 3 saw it and read the page again
    if change in ("follow", "follow back"):
        sync.follow_changed(appdata, pool, ann, dee if change == "follow" else cat, now_ms())
    assert verify.diff(appdata, pool, [ann, cat, dee]) == []
    read.clear()
    sync.rebuild(appdata, pool, [ann, cat, dee])  # nothing changes now
    assert len(read) == 1
    assert verify.diff(appdata, pool, [ann, cat, dee]) == []


def test_a_stale_cached_id_lookup_costs_a_round_never_a_wrong_entry(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    """The id lookups' cache answers the first read of an import's truth;
    the check after writing asks MySQL. An account linked behind a cache
    that still says "nobody" (another process's link, not yet expired)
    is seen there, and the entry is written again with its user; a rebuild
    over the same stale cache ends the same way. An account page then
    settles the imports naming it with the cache forgotten first."""
    me, other, eve = users(appdata, "Me Myself", "Oto Other", "Eve Evans")
    book = [{"name": "Eve from work", "email": "eve.stale@example.com"}]
    for owner in (me, other):
        contacts.put_source(appdata, owner, "address_book", book, at_ms=now_ms())
    cache = AccountCache(hit_ttl_ms=3_600_000, miss_ttl_ms=3_600_000)
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK, cache)
    assert cache.stats().misses == 1 and cache.stats().negative_hits == 1  # one miss, then its answer again

    def users_of(owner: int) -> list[int | None]:
        return [m.contact.user_id for m in index.lookup(owner, "eve").matches]

    assert users_of(me) == [None]
    contacts.link_account(appdata, "email:eve.stale@example.com", eve)  # no fix-up: only the check can see it
    sync.source_changed(appdata, pair[PRIMARY], me, ADDRESS_BOOK, cache)
    assert cache.stats().negative_hits == 2  # the first read was stale
    assert users_of(me) == [eve]
    sync.rebuild(appdata, pair[PRIMARY], [other], cache)
    assert users_of(other) == [eve]
    contacts.unlink_account(appdata, "email:eve.stale@example.com")
    job = UpdateJob.account(PRIMARY, "email:eve.stale@example.com", "c1")
    step = sync.account_page(appdata, pair[PRIMARY], job, 1, cache)
    assert step.entries > 0 and step.next_job is not None and step.next_job.after == sorted([(me, "address_book"),
                                                                                            (other, "address_book")])[0]
    assert sync.account_page(appdata, pair[PRIMARY], step.next_job, 1, cache).entries > 0
    assert users_of(me) == [None] and users_of(other) == [None]
