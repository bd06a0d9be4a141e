"""Actions in one millisecond, on real MySQL and HBase: the index ends as
the last action says. Each index entry is versioned with the newest time
of the records it comes from, so each action must get a time past every
record it joins, the other user's too (``tasks.appdata.graph``), or an
entry would change and keep its version: the old name's tokens of a
rename, or a mutual entry an unfollow removes, would stay."""

from __future__ import annotations

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPair
from tasks.typeahead import sync
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.sources import ADDRESS_BOOK
from tests.typeahead.helpers import differences, follow, found, rename, users


def test_two_imports_in_one_millisecond_index_the_second(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    (me,) = users(appdata, "Same Ms Importer")
    at = now_ms()
    first = contacts.put_source(appdata, me, "address_book", [{"name": "Carl Old", "email": "carl@example.com"}],
                                at_ms=at)
    second = contacts.put_source(appdata, me, "address_book", [{"name": "Cora New", "email": "cora@example.com"}],
                                 at_ms=at)
    assert (first.updated_at_ms, second.updated_at_ms) == (at, at + 1)
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK)
    assert found(index, me, "c") == [("Cora New", "address_book")]
    assert differences(appdata, pair, [me]) == {"primary": 0, "standby": 0}


def test_a_rename_in_the_millisecond_of_a_follow_drops_the_old_names_tokens(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    ann, bob = users(appdata, "Ann Archer", "Bob Baker")
    at = now_ms()
    follow(appdata, pair, ann, bob, at)  # indexed under Bob's name at the follow's time
    followed = graph.follow_time(appdata, ann, bob)
    assert followed is not None and rename(appdata, pair, bob, "Rob Roe", at=at) > followed
    assert found(index, ann, "bob") == []
    assert found(index, ann, "rob") == [("Rob Roe", "following")]
    assert differences(appdata, pair, [ann, bob]) == {"primary": 0, "standby": 0}


def test_an_unfollow_in_the_millisecond_of_a_follow_back_removes_both_mutual_entries(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    """Bob's clock is ahead of Ann's (he acted more in this millisecond):
    the unfollow's time must still be past his follow back."""
    ann, bob, cy, dee = users(appdata, "Ann Archer", "Bob Baker", "Cy Cole", "Dee Dunn")
    at = now_ms()
    follow(appdata, pair, ann, bob, at)
    follow(appdata, pair, bob, cy, at)
    follow(appdata, pair, bob, dee, at)
    follow(appdata, pair, bob, ann, at)
    assert found(index, ann, "bob") == [("Bob Baker", "mutual")]
    gone_at = graph.unfollow_clock(appdata, ann, bob, at)  # as ContactActions.unfollow takes it
    graph.unfollow_user(appdata, ann, bob)
    for cluster in pair:
        sync.follow_changed(appdata, cluster, ann, bob, gone_at)
    assert found(index, ann, "bob") == [("Bob Baker", "followers")]
    assert found(index, bob, "ann") == [("Ann Archer", "following")]
    assert differences(appdata, pair, [ann, bob, cy, dee]) == {"primary": 0, "standby": 0}


def test_an_unfollow_by_a_process_behind_the_one_that_made_the_users_removes_both_entries(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    """The users were made by a process whose clock runs 800 ms ahead: their
    names date from then, and so do the entries naming them. The follow and
    the unfollow come from a process behind it; the unfollow must still be
    past those versions, or its removal leaves both entries."""
    made_at = now_ms() + 800
    ann, bob = (graph.create_user(appdata, {"name": name}, created_at_ms=made_at).id
                for name in ("Ann Archer", "Bob Baker"))
    at = now_ms()
    follow(appdata, pair, ann, bob, at)
    assert found(index, ann, "bob") == [("Bob Baker", "following")]
    gone_at = graph.unfollow_clock(appdata, ann, bob, at + 1)  # as ContactActions.unfollow takes it
    assert gone_at > made_at
    graph.unfollow_user(appdata, ann, bob)
    for cluster in pair:
        sync.follow_changed(appdata, cluster, ann, bob, gone_at)
    assert found(index, ann, "bob") == []
    assert found(index, bob, "ann") == []
    assert differences(appdata, pair, [ann, bob]) == {"primary": 0, "standby": 0}
