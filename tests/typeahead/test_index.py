"""The contacts index on real HBase, through the plain functions the tasks
call (tasks.typeahead.sync) and the lookup: sources, ranking across them,
de-duplication, renames, out-of-order follows, imports, and the verify pass."""

from __future__ import annotations

from typing import Any

import pytest

from pinlater.observe import tracing
from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import PRIMARY, ClusterPair
from tasks.typeahead import sync, verify
from tasks.typeahead.entries import (
    TOKEN_FAMILY,
    WIDE_TABLE,
    Entry,
    row_prefix,
    token_qualifier,
)
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.runtime import TypeaheadRuntime
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.service import idl as contacts_idl
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import ADDRESS_BOOK, FOLLOWERS, FOLLOWING, MUTUAL, SOURCES, source_named
from tasks.typeahead.truth import user_key
from tasks.typeahead.wire import connect
from tests.support.spans import spans_in_memory
from tests.typeahead.helpers import differences, follow, found, rename, unfollow, users


def contacts_client(server: ContactsServer) -> Any:
    return connect("127.0.0.1", server.port, timeout_ms=30_000)


def test_follow_fills_following_followers_and_mutual(appdata: AppData, pair: ClusterPair,
                                                     index: ContactsIndex) -> None:
    ann, bob = users(appdata, "Ann Archer", "Bob Baker")
    follow(appdata, pair, ann, bob)
    assert found(index, ann, "bob") == [("Bob Baker", "following")]
    assert found(index, bob, "ann") == [("Ann Archer", "followers")]
    follow(appdata, pair, bob, ann)
    assert found(index, ann, "bo ba") == [("Bob Baker", "mutual")]
    assert found(index, bob, "archer") == [("Ann Archer", "mutual")]
    match = index.lookup(ann, "bob").matches[0]
    assert match.sources == ("mutual", "following", "followers")
    assert match.contact.user_id == bob
    unfollow(appdata, pair, ann, bob)
    assert found(index, ann, "bob") == [("Bob Baker", "followers")]
    assert found(index, bob, "ann") == [("Ann Archer", "following")]
    assert differences(appdata, pair, [ann, bob]) == {"primary": 0, "standby": 0}


def test_an_unfollow_processed_before_its_follow_still_wins(appdata: AppData, pair: ClusterPair,
                                                            index: ContactsIndex) -> None:
    ann, bob = users(appdata, "Ann Early", "Bob Late")
    t_follow = now_ms() - 10_000
    graph.follow_user(appdata, ann, bob, at_ms=t_follow)
    graph.unfollow_user(appdata, ann, bob)
    t_unfollow = t_follow + 5_000
    pool = pair[PRIMARY]
    sync.follow_changed(appdata, pool, ann, bob, t_unfollow)  # the unfollow's job runs first
    # The follow's job, late: MySQL says no follow, so it writes nothing...
    sync.follow_changed(appdata, pool, ann, bob, t_follow)
    assert found(index, ann, "bob") == []
    # ...and a stale put at the follow's time (a job that read MySQL before
    # the unfollow, whose worker died before it read MySQL again) is found
    # and deleted by the next settle of the place: its member record stays
    # readable, so nothing of it is left that a settle cannot find.
    from tasks.typeahead.writer import put_entries

    put_entries(pool, [Entry(ann, FOLLOWING, user_key(bob), "Bob Late", bob, t_follow)])
    assert found(index, ann, "bob") == [("Bob Late", "following")]
    sync.follow_changed(appdata, pool, ann, bob, t_follow)  # the job run again
    assert found(index, ann, "bob") == []


def test_ranking_puts_the_closer_name_first_and_dedups_by_user(appdata: AppData, pair: ClusterPair,
                                                               index: ContactsIndex) -> None:
    me, = users(appdata, "Me Myself")
    near, far, other = users(appdata, "John Smith", "John Michael Smith", "Johnny Smithers")
    for contact in (near, far, other):
        follow(appdata, pair, me, contact)
    assert [name for name, _ in found(index, me, "john smith")] == [
        "John Smith", "John Michael Smith", "Johnny Smithers"]
    # The far one also follows back: mutual ranks above following, whatever the proximity.
    follow(appdata, pair, far, me)
    assert found(index, me, "john smith")[0] == ("John Michael Smith", "mutual")
    assert found(index, me, "smith john", limit=1) == [("John Michael Smith", "mutual")]


def test_accents_case_and_several_tokens(appdata: AppData, pair: ClusterPair, index: ContactsIndex) -> None:
    me, jose, zoe = users(appdata, "Reader", "José Álvarez-Núñez", "Zoë O'Brien")
    follow(appdata, pair, me, jose)
    follow(appdata, pair, me, zoe)
    assert found(index, me, "jose alv") == [("José Álvarez-Núñez", "following")]
    assert found(index, me, "NUNEZ") == [("José Álvarez-Núñez", "following")]
    assert found(index, me, "obrien z") == [("Zoë O'Brien", "following")]
    assert found(index, me, "zoe x") == []
    assert found(index, me, "   ") == []


def test_a_rename_reaches_every_index_and_the_old_name_stops_finding(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    star, *fans = users(appdata, "Old Name", "Fan One", "Fan Two", "Fan Three", "Fan Four", "Fan Five")
    for fan in fans:
        follow(appdata, pair, fan, star)
    follow(appdata, pair, star, fans[0])  # mutual with one, followee of one
    rename(appdata, pair, star, "Newer Name")
    for fan in fans:
        assert found(index, fan, "old") == []
        assert [n for n, _ in found(index, fan, "newer name")] == ["Newer Name"]
        assert [n for n, _ in found(index, fan, "name")] == ["Newer Name"]  # the kept token too
    assert found(index, fans[0], "new")[0] == ("Newer Name", "mutual")
    assert differences(appdata, pair, [star, *fans]) == {"primary": 0, "standby": 0}


def test_a_lookup_limited_to_some_sources_finds_exactly_their_contacts(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    me, carol, bob, dan = users(appdata, "Me Myself", "Cara Lane", "Cal Brown", "Cass Dean")
    contacts.link_account(appdata, "email:cara@example.com", carol)
    follow(appdata, pair, me, carol)  # following
    follow(appdata, pair, bob, me)  # followers (tall)
    follow(appdata, pair, me, dan)
    follow(appdata, pair, dan, me)  # mutual
    book = [{"name": "Cara L", "email": "cara@example.com"}, {"name": "Carl Unknown", "email": "carl@example.com"}]
    contacts.put_source(appdata, me, "address_book", book, at_ms=now_ms())
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK)
    everything = index.lookup(me, "ca", 100).matches
    assert len(everything) == 4
    subsets = [{s} for s in SOURCES] + [{FOLLOWING, ADDRESS_BOOK}, {FOLLOWERS, MUTUAL}, set(SOURCES)]
    for subset in subsets:
        names = {s.name for s in subset}
        matches = index.lookup(me, "ca", 100, sources=subset).matches
        assert all(m.source in names and set(m.sources) <= names for m in matches), subset
        # A person found in several sources is one match, keyed by the source ranked first.
        expected = {m.contact.user_id or m.contact.key for m in everything if names & set(m.sources)}
        assert {m.contact.user_id or m.contact.key for m in matches} == expected, subset
    only_followers = index.lookup(me, "ca", 100, sources={FOLLOWERS}).matches
    assert {(m.contact.user_id, m.sources) for m in only_followers} == {(bob, ("followers",)), (dan, ("followers",))}
    with pytest.raises(ValueError, match="sources are some of"):
        index.lookup(me, "ca", sources=set())


def test_the_contacts_service_answers_as_the_index_does(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    me, ann, andy, anita = users(appdata, "Me Myself", "Ann Archer", "Andy Anders", "Anita Ames")
    follow(appdata, pair, me, ann)
    follow(appdata, pair, ann, me)
    follow(appdata, pair, andy, me)
    follow(appdata, pair, me, anita)
    server = ContactsServer(index.lookup, "127.0.0.1", 0).start()
    client = contacts_client(server)
    try:
        for query, limit, sources in [("an", 10, None), ("a a", 2, None), ("an", 10, ["followers"]),
                                      ("an", 10, ["following", "mutual"]), ("zed", 10, None)]:
            wire = client.lookup(contacts_idl.LookupRequest(owner=me, query=query, limit=limit, sources=sources))
            asked = None if sources is None else {source_named(s) for s in sources}
            direct = index.lookup(me, query, limit, sources=asked)
            assert wire.servedBy == direct.served_by == "primary"
            assert [(m.contact.key, m.contact.name, m.contact.userId, m.source, m.sources, m.score)
                    for m in wire.matches] == [
                (m.contact.key, m.contact.name, m.contact.user_id, m.source, list(m.sources), m.score)
                for m in direct.matches], (query, sources)
        assert len(client.lookup(contacts_idl.LookupRequest(owner=me, query="an")).matches) == 3
    finally:
        client.close()
        server.stop(grace_s=2)


def test_updates_through_the_contacts_service_keep_both_clusters_as_the_truth_says(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    """What the typeahead's jobs do, called over Thrift: follows, an import,
    a rename page by page, a rebuild; then nothing differs from the truth."""
    me, ann, bob, cat = users(appdata, "Me Myself", "Ann Archer", "Bob Baker", "Cat Cole")
    writer = TypeaheadRuntime(TypeaheadSettings(rename_page=1), appdata, pair)
    server = ContactsServer(index.lookup, "127.0.0.1", 0, writer=writer).start()
    client = contacts_client(server)
    clusters = (PRIMARY, "standby")
    try:
        for follower, followee in ((me, ann), (ann, me), (me, bob), (cat, bob)):
            at = now_ms()
            graph.follow_user(appdata, follower, followee, at_ms=at)
            assert all(client.followChanged(c, follower, followee, at) > 0 for c in clusters)
        contacts.put_source(appdata, me, "address_book", [{"name": "Carl Unknown", "email": "carl@example.com"}],
                            at_ms=now_ms())
        assert all(client.sourceChanged(c, me, "address_book") > 0 for c in clusters)
        assert found(index, me, "a") == [("Ann Archer", "mutual")]
        assert [m.contact.name for m in index.lookup(me, "ca").matches] == ["Carl Unknown"]
        _old, _new, name_at = graph.rename_user(appdata, bob, "Bobby Tables")
        for cluster in clusters:
            page: Any = contacts_idl.RenamePage(userId=bob, nameAt=name_at, phase="followers")
            pages = 0
            while page is not None:
                step = client.renamePage(cluster, page)
                if step.usersPage is not None:
                    client.renamePage(cluster, step.usersPage)
                page, pages = step.nextPage, pages + 1
            assert pages >= 3  # pages of one: two followers, then the followees
        assert found(index, me, "bobby") == [("Bobby Tables", "following")]
        assert found(index, cat, "bob") == [("Bobby Tables", "following")]
        for cluster in clusters:
            client.rebuild(cluster, [me, ann, bob, cat])
        assert differences(appdata, pair, [me, ann, bob, cat]) == {"primary": 0, "standby": 0}
    finally:
        client.close()
        server.stop(grace_s=2)


def test_imports_dedup_with_pinterest_contacts_and_drop_removed_ones(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    me, carol = users(appdata, "Importer", "Carol Danvers")
    contacts.link_account(appdata, "email:carol@example.com", carol)
    follow(appdata, pair, me, carol)
    book = [{"name": "Carol D", "email": "Carol@Example.com"}, {"name": "Carl Unknown", "email": "carl@example.com"}]
    contacts.put_source(appdata, me, "address_book", book, at_ms=now_ms())
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK)
    results = index.lookup(me, "car").matches
    assert [(m.contact.name, m.source, m.sources) for m in results] == [
        ("Carol Danvers", "following", ("following", "address_book")),
        ("Carl Unknown", "address_book", ("address_book",)),
    ]
    # A later import without Carl removes him, even one asking for an older
    # time than the stored import's: the import made last wins, just after it.
    again = contacts.put_source(appdata, me, "address_book", book, at_ms=now_ms() + 1)
    last = contacts.put_source(appdata, me, "address_book", book[:1], at_ms=1000)
    assert last.updated_at_ms == again.updated_at_ms + 1
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK)
    assert found(index, me, "carl") == []
    assert differences(appdata, pair, [me, carol]) == {"primary": 0, "standby": 0}


def test_verify_finds_and_repairs_what_differs(appdata: AppData, pair: ClusterPair, index: ContactsIndex) -> None:
    me, dan, eve = users(appdata, "Verifier", "Dan Drift", "Eve Gone")
    follow(appdata, pair, me, dan)
    graph.follow_user(appdata, me, eve, at_ms=now_ms())  # her follow's jobs never ran
    pool = pair[PRIMARY]
    # Damage: a stale token cell of a name Dan never had.
    from tasks.hbase import put_cells

    row = row_prefix(me, FOLLOWING)
    put_cells(pool, WIDE_TABLE, {row: {TOKEN_FAMILY + token_qualifier("zed", user_key(dan)): b'{"n":"Zed","u":1}'}},
              timestamp=now_ms())
    assert found(index, me, "zed") == [("Zed", "following")]
    assert found(index, me, "eve") == []
    rounds: list[int] = []
    for _round in range(5):
        diffs = verify.diff(appdata, pool, [me, dan, eve])
        rounds.append(len(diffs))
        if not diffs:
            break
        verify.repair(appdata, pool, diffs)
    # Round 1 deletes the stale cell (exactly its version) and settles Eve's places.
    assert rounds == [3, 0]  # me's zed cell; Eve in me's following and me in Eve's followers
    assert found(index, me, "zed") == []
    assert found(index, me, "eve") == [("Eve Gone", "following")]


def test_a_huge_tall_source_is_narrowed_by_the_querys_other_tokens(appdata: AppData, pair: ClusterPair) -> None:
    """The followers scan reads a few rows only (here 3) of the query's
    longest token; HBase keeps the rows whose names also have the query's
    other tokens, so the one Johnathan Li among 13 Johnathans is found
    (without the filter, the 3 rows read would be other Johnathans)."""
    from tasks.typeahead.settings import TypeaheadSettings

    star, = users(appdata, "Tall Star")
    # Li's id is the highest (same shard, made last): his row is last in key order.
    many = [graph.create_user(appdata, {"name": f"Johnathan Doe{i}"}, shard=0).id for i in range(12)]
    li = graph.create_user(appdata, {"name": "Johnathan Li"}, shard=0).id
    for fan in (*many, li):
        follow(appdata, pair, fan, star)
    narrow = ContactsIndex(pair, TypeaheadSettings(tall_scan_limit=3))
    assert found(narrow, star, "johnathan li") == [("Johnathan Li", "followers")]
    assert found(narrow, star, "li johnat") == [("Johnathan Li", "followers")]
    first = found(narrow, star, "johnathan")
    assert len(first) == 3 and all(name.startswith("Johnathan Doe") for name, _ in first)
    assert found(narrow, star, "johnathan zz") == []


def test_a_renamed_followers_row_matches_the_other_tokens_of_its_new_name_only(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    """A rename keeps the row of a token both names share ("name") and
    writes a newer version of its tokens cell: the followers scan's filter
    judges that newest version alone, whichever token it scans."""
    star, fan, other = users(appdata, "Tall Star", "Old Name", "Name Keeper")
    for someone in (fan, other):
        follow(appdata, pair, someone, star)
    rename(appdata, pair, fan, "Newer Name")
    for query in ("old name", "name old", "old"):
        assert found(index, star, query) == [], query
    for query in ("newer name", "name newer", "name ne"):
        assert found(index, star, query) == [("Newer Name", "followers")], query
    assert sorted(found(index, star, "name")) == [("Name Keeper", "followers"), ("Newer Name", "followers")]
    assert found(index, star, "name k") == [("Name Keeper", "followers")]


def test_a_lookup_with_a_deadline_is_traced_under_its_caller(appdata: AppData, pair: ClusterPair) -> None:
    """With the default cut-off a lookup's primary calls run under a
    deadline: its HBase calls are spans of the caller's trace all the same."""
    ann, bob = users(appdata, "Ann Archer", "Bob Baker")
    follow(appdata, pair, ann, bob)
    index = ContactsIndex(pair, TypeaheadSettings())
    assert index.settings.standby_after_ms > 0
    with spans_in_memory() as exporter, tracing.span("typing") as caller:
        assert found(index, ann, "bob") == [("Bob Baker", "following")]
    hbase = [s for s in exporter.get_finished_spans() if s.name.startswith("hbase ")]
    assert hbase, [s.name for s in exporter.get_finished_spans()]
    assert all(s.parent is not None and s.parent.span_id == caller.get_span_context().span_id for s in hbase)
