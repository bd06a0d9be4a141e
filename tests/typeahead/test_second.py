"""The second_degree source on real MariaDB and HBase: its bounded truth
against counting every follow (the consistency oracle's), its lists
through the jobs' functions in any order, renames two hops away, a stale
list written late, lookups and their ranking, the backfill kind's diff
and repair, and the Contacts Service's calls."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tasks.appdata import graph, mappings
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import USER_FOLLOWS_USER
from tasks.hbase import ClusterPair, put_versions
from tasks.typeahead import second, sync
from tasks.typeahead.entries import owner_key
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.jobs import RenameJob, SecondJob
from tasks.typeahead.runtime import TypeaheadRuntime
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import SECOND_DEGREE
from tests.consistency import oracle
from tests.typeahead.helpers import users

SMALL = second.Limits(followees=3, per_followee=3, cap=4)


def _limits(limits: second.Limits) -> tuple[int, int, int]:
    return limits.followees, limits.per_followee, limits.cap


def _random_graph(store: AppData, rng: random.Random, n: int = 9, follows: int = 50) -> list[int]:
    ids = users(store, *(f"Pat{chr(97 + i)} Lee" for i in range(n)))
    at = now_ms() - 1_000_000
    for _ in range(follows):
        a, b = rng.sample(ids, 2)
        at += rng.randrange(1, 3)  # some follows share a millisecond: ties break by id
        if rng.random() < 0.8:
            graph.follow_user(store, a, b, at_ms=at)
        else:
            graph.unfollow_user(store, a, b)
    return ids


@pytest.mark.parametrize("seed", range(4))
def test_each_ids_newest_rows_are_its_first_page(appdata: AppData, seed: int) -> None:
    ids = _random_graph(appdata, random.Random(seed))
    for n in (1, 2, 5):
        newest = mappings.newest_of_many(appdata, USER_FOLLOWS_USER, ids, n)
        for user in ids:
            assert newest.get(user, []) == mappings.page(appdata, USER_FOLLOWS_USER, user, limit=n).edges


@pytest.mark.parametrize("seed", range(6))
def test_the_bounded_truth_equals_counting_every_follow(appdata: AppData, seed: int) -> None:
    rng = random.Random(seed)
    ids = _random_graph(appdata, rng)
    for limits in (SMALL, second.Limits(1, 1, 1), second.Limits(200, 100, 50)):
        want = oracle.expected_second(appdata, ids, _limits(limits))
        got = second.truth(appdata, ids, limits)
        assert {o: list(listed) for o, listed in got.items()} == want, limits
    assert any(len(v) > 1 for v in second.truth(appdata, ids, SMALL).values())


def test_a_celebrity_counts_at_most_the_followees_counted(appdata: AppData) -> None:
    """Twelve followees all following one account: it counts 3, the
    followees counted, and the owner's truth read 3 followees' follows."""
    owner, star, *fans = users(appdata, "Owner One", "Star Sky", *(f"Fan {i}" for i in range(12)))
    at = now_ms() - 100_000
    for i, fan in enumerate(fans):
        graph.follow_user(appdata, fan, star, at_ms=at + i)
        graph.follow_user(appdata, owner, fan, at_ms=at + 100 + i)
    assert second.truth(appdata, [owner], SMALL)[owner] == ((star, 3, "Star Sky"),)
    # The owner follows more than are counted: whom it follows is never listed.
    graph.follow_user(appdata, owner, star, at_ms=at - 5)
    assert second.truth(appdata, [owner], SMALL)[owner] == ()


def test_lookups_rank_second_degree_contacts_by_shared_followees_below_the_rest(
    appdata: AppData, pair: ClusterPair
) -> None:
    ann, bob, cy, dan, dave, eve = users(appdata, "Ann Ash", "Bob Bay", "Cy Cole", "Daniela Dee", "Dave Doe",
                                           "Eve Dunn")
    for a, b in ((ann, bob), (ann, cy), (bob, dave), (bob, dan), (cy, dan), (bob, eve), (eve, ann)):
        at = now_ms()
        graph.follow_user(appdata, a, b, at_ms=at)
        for cluster in pair:
            sync.follow_changed(appdata, cluster, a, b, at)
    for cluster in pair:
        second.settle(appdata, cluster, [ann, bob, cy, eve], SMALL)
    index = ContactsIndex(pair)
    result = index.lookup(ann, "d", 10)
    # Eve follows Ann and is followed by Bob: found in both, shown from
    # followers, which rank higher; then Daniela, followed by two of Ann's
    # followees, above Dave, followed by one, though "d" scores Dave higher.
    assert [(m.contact.name, m.source) for m in result.matches] == [
        ("Eve Dunn", "followers"), ("Daniela Dee", "second_degree"), ("Dave Doe", "second_degree")]
    assert result.matches[1].score < result.matches[2].score
    assert result.matches[0].sources == ("followers", "second_degree")
    only = index.lookup(ann, "d", 10, sources=[SECOND_DEGREE]).matches
    assert [m.contact.user_id for m in only] == [dan, dave, eve]
    assert index.lookup(bob, "d", 10, sources=[SECOND_DEGREE]).matches == []  # Bob follows them already


def test_a_stale_list_written_late_and_above_is_replaced(appdata: AppData, pair: ClusterPair) -> None:
    ann, bob, cy = users(appdata, "Ann Ash", "Bob Bay", "Cy Cole")
    graph.follow_user(appdata, ann, bob)
    graph.follow_user(appdata, bob, cy)
    pool = pair["primary"]
    future = now_ms() + 3_600_000  # a clock an hour ahead wrote it
    put_versions(pool, second.SECOND_TABLE, [(owner_key(ann), second.LIST_COLUMN, b"[[1,9]]", future)])
    assert second.differences(appdata, pool, [ann], SMALL)
    assert second.settle(appdata, pool, [ann], SMALL) == 1
    assert second.stored_lists(pool, [ann])[ann] == (future + 1, ((cy, 1, "Cy Cole"),))
    assert second.differences(appdata, pool, [ann], SMALL) == {}
    assert second.settle(appdata, pool, [ann], SMALL) == 0  # right already: nothing written


@pytest.mark.parametrize("seed", range(3))
def test_chains_run_in_any_order_leave_every_list_right(appdata: AppData, pair: ClusterPair, seed: int) -> None:
    """Follows, unfollows and renames, then their chains (a rename's
    through its pages, which name the second_degree chains two hops away)
    in a random order, pages interleaved."""
    rng = random.Random(seed)
    ids = users(appdata, *(f"Kim{chr(97 + i)} Ro" for i in range(7)))
    todo: list[SecondJob | RenameJob] = []
    for _ in range(30):
        a, b = rng.sample(ids, 2)
        roll = rng.random()
        if roll < 0.65:
            graph.follow_user(appdata, a, b)
        elif roll < 0.85:
            graph.unfollow_user(appdata, a, b)
        else:
            _old, _new, at = graph.rename_user(appdata, a, rng.choice(["Zed Ro", "Yan Ro", "Xia Ro"]))
            todo += [RenameJob(c, a, at) for c in ("primary", "standby")]
            continue
        at = now_ms()
        todo += [SecondJob.started(c, a, at) for c in ("primary", "standby")]
    while todo:
        job = todo.pop(rng.randrange(len(todo)))
        if isinstance(job, SecondJob):
            step = sync.second_page(appdata, pair[job.cluster], job, 1 + rng.randrange(2), SMALL)
            todo += [j for j in (step.users_job, step.next_job) if j is not None]
        else:
            renamed = sync.rename_page(appdata, pair[job.cluster], job, 1 + rng.randrange(2), SMALL)
            todo += [j for j in (renamed.users_job, renamed.next_job) if j is not None]
            todo += [SecondJob.renaming(job.cluster, actor, job.user_id, job.name_at)
                     for actor in renamed.second_actors]
    assert oracle.second_differences(appdata, pair, ids, _limits(SMALL)) == []


def test_a_rename_reaches_the_lists_two_hops_away(appdata: AppData, pair: ClusterPair) -> None:
    ann, bob, cy, dee = users(appdata, "Ann Ash", "Bob Bay", "Cy Cole", "Dee Dunn")
    graph.follow_user(appdata, ann, bob)
    graph.follow_user(appdata, bob, cy)
    graph.follow_user(appdata, dee, cy)
    pool = pair["primary"]
    second.settle(appdata, pool, [ann], SMALL)
    _old, _new, at = graph.rename_user(appdata, cy, "Cyd Cole")
    first = sync.rename_page(appdata, pool, RenameJob("primary", cy, at), 10, SMALL)
    assert first.users_job is not None and set(first.users_job.users or ()) == {bob, dee}
    users_step = sync.rename_page(appdata, pool, first.users_job, 10, SMALL)
    # Bob follows Cy and Ann follows Bob: Ann's list shows Cy. Dee follows Cy
    # too, but nobody follows Dee: no list to recompute there.
    assert users_step.second_actors == (bob,)
    chain = SecondJob.renaming("primary", bob, cy, at)
    step = sync.second_page(appdata, pool, chain, 10, SMALL)
    assert step.entries == 0 and step.users_job is not None and step.users_job.users == (ann,)
    assert sync.second_page(appdata, pool, step.users_job, 10, SMALL).entries == 1
    assert ContactsIndex(pair).lookup(ann, "cyd", 5, sources=[SECOND_DEGREE]).matches[0].contact.name == "Cyd Cole"


def test_the_backfill_kind_finds_and_repairs_lists_and_names(appdata: AppData, pair: ClusterPair) -> None:
    ann, bob, cy = users(appdata, "Ann Ash", "Bob Bay", "Cy Cole")
    graph.follow_user(appdata, ann, bob)
    graph.follow_user(appdata, bob, cy)
    pool = pair["standby"]
    assert set(second.differences(appdata, pool, [ann, bob, cy], SMALL)) == {ann}
    assert sync.rebuild_second(appdata, pool, [ann, bob, cy], SMALL) == 1
    assert second.differences(appdata, pool, [ann, bob, cy], SMALL) == {}
    # A rename whose chains never ran: found, and rewritten.
    graph.rename_user(appdata, cy, "Cyd Cole")
    assert "the truth has 1" in second.differences(appdata, pool, [ann], SMALL)[ann]
    assert sync.rebuild_second(appdata, pool, [ann], SMALL) == 1
    assert oracle.second_differences(appdata, pair, [ann], _limits(SMALL)) != []  # the primary was never filled
    assert second.differences(appdata, pool, [ann], SMALL) == {}


def test_the_contacts_service_recomputes_and_looks_up_second_degree(appdata: AppData, pair: ClusterPair) -> None:
    ann, bob, cy = users(appdata, "Ann Ash", "Bob Bay", "Cy Cole")
    at = now_ms()
    graph.follow_user(appdata, ann, bob, at_ms=at)
    graph.follow_user(appdata, bob, cy, at_ms=at)
    settings = TypeaheadSettings(second_cap=4)
    writer = TypeaheadRuntime(settings, appdata, pair)
    server = ContactsServer(ContactsIndex(pair, settings).lookup, "127.0.0.1", 0, writer=writer).start()
    try:
        from tasks.typeahead.wire import connect, idl, second_page_of

        client: Any = connect("127.0.0.1", server.port, timeout_ms=30_000)
        step = client.secondPage("primary", second_page_of(SecondJob.started("primary", bob, at)))
        assert step.entries == 0 and step.usersPage.users == [ann] and step.nextPage is None
        assert client.secondPage("primary", step.usersPage).entries == 1
        request = idl.LookupRequest(owner=ann, query="cy", limit=5, sources=["second_degree"])
        matches = client.lookup(request).matches
        assert [(m.contact.userId, m.source) for m in matches] == [(cy, "second_degree")]
        assert client.rebuildSecond("standby", [ann, bob]) == 1
        with pytest.raises(idl.ContactsException) as caught:
            client.rebuildSecond("standby", [])
        assert "at least one owner" in caught.value.message
        client.close()
    finally:
        server.stop()
