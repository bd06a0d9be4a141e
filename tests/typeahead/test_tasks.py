"""The typeahead's tasks end to end: Celery workers on PinLater (in-process
stores, or through a ``pinlater server``; writing the index themselves, or
through a Contacts Service) keep the index on both clusters equal to MySQL
through follows, unfollows, renames and imports that the application makes
with ``ContactActions``."""

from __future__ import annotations

import time

import pytest

from tasks.appdata import contacts
from tasks.appdata.store import now_ms
from tasks.hbase import STANDBY
from tasks.typeahead import queues, second
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.settings import TypeaheadSettings
from tests.feeds.world import FeedWorld
from tests.servers import services
from tests.support.waits import wait_for
from tests.typeahead.helpers import differences, found, users

# A rename throttled by its queue's rate takes tens of seconds: started early,
# so no process is left with it at the end.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("world", ["redis", "mysql", "redis+thrift", "redis+contacts"], indirect=True)
def test_actions_keep_the_index_equal_to_mysql(world: FeedWorld) -> None:
    store, act = world.store, world.contacts
    ann, bob, cat, dee, fay = users(store, "Ann Able", "Bob Bright", "Cat Cole", "Dee Dunn", "Fay Fox")
    contacts.link_account(store, "email:dee@example.com", dee)
    world.start_workers(concurrency=2)
    act.follow(ann, bob)
    act.follow(bob, ann)
    act.follow(ann, cat)
    act.follow(cat, ann)
    act.unfollow(cat, ann)
    act.follow(cat, fay)  # Ann follows Cat: Fay is second_degree to Ann, through Cat's chain
    act.connect_source(ann, "address_book", [{"name": "Dee from school", "email": "dee@example.com"},
                                             {"name": "Eli Eastwood", "email": "eli@example.com"}])
    act.rename(bob, "Robert Bright")
    world.settle(60, "the typeahead jobs")
    assert world.failed_jobs() == {}
    index = ContactsIndex(world.pair)
    assert found(index, ann, "b") == [("Robert Bright", "mutual")]
    assert found(index, ann, "bob") == []
    assert found(index, ann, "c") == [("Cat Cole", "following")]
    assert found(index, cat, "ann") == [("Ann Able", "followers")]
    # Dee's address-book entry is Dee (same user id) whatever the name in the book.
    dee_match = index.lookup(ann, "dee").matches
    assert [(m.contact.user_id, m.source) for m in dee_match] == [(dee, "address_book")]
    assert found(index, ann, "eli") == [("Eli Eastwood", "address_book")]
    assert found(index, ann, "fa") == [("Fay Fox", "second_degree")]
    assert differences(store, world.pair, [ann, bob, cat, dee, fay]) == {"primary": 0, "standby": 0}
    limits = second.Limits.of(TypeaheadSettings())
    assert [second.differences(store, pool, [ann, bob, cat, dee, fay], limits) for pool in world.pair] == [{}, {}]
    if world.contacts_calls is not None:  # every kind of update went through the service
        calls = world.contacts_calls()
        assert all(calls.get(method, 0) > 0
                   for method in ("followChanged", "sourceChanged", "renamePage", "secondPage")), calls


@pytest.mark.parametrize("world", ["redis", "redis+thrift"], indirect=True)
def test_actions_in_one_millisecond_end_as_the_last_one_says(world: FeedWorld) -> None:
    """Every action asks for the same millisecond (a burst, or processes
    whose clocks differ a little), and the jobs of the earlier ones run
    before the later ones are made: the index still ends as the actions,
    in the order they were made, say."""
    store, act = world.store, world.contacts
    ann, bob, cat, dee = users(store, "Ann Able", "Bob Bright", "Cat Cole", "Dee Dunn")
    world.start_workers(concurrency=2)
    at = now_ms()
    act.follow(ann, bob, at_ms=at)
    for other in (cat, dee, ann):  # Bob's clock runs ahead of Ann's
        act.follow(bob, other, at_ms=at)
    world.settle(60, "the follows")
    act.rename(bob, "Robert Bright", at_ms=at)
    act.connect_source(ann, "address_book", [{"name": "Eli Eastwood", "email": "eli@example.com"}], at_ms=at)
    act.connect_source(ann, "address_book", [{"name": "Fay Fox", "email": "fay@example.com"}], at_ms=at)
    world.settle(60, "the rename and the imports")
    index = ContactsIndex(world.pair)
    assert found(index, ann, "bob") == []
    assert found(index, ann, "robert") == [("Robert Bright", "mutual")]
    assert found(index, ann, "eli") == []
    assert found(index, ann, "fay") == [("Fay Fox", "address_book")]
    act.unfollow(ann, bob, at_ms=at)
    world.settle(60, "the unfollow")
    assert world.failed_jobs() == {}
    assert found(index, ann, "robert") == [("Robert Bright", "followers")]
    assert found(index, bob, "ann") == [("Ann Able", "following")]
    assert differences(store, world.pair, [ann, bob, cat, dee]) == {"primary": 0, "standby": 0}


def test_a_rename_is_throttled_by_its_queue_rate(world: FeedWorld) -> None:
    store, act = world.store, world.contacts
    star, *fans = users(store, "Rate Star", *(f"Fan {i}" for i in range(300)))
    for fan in fans:
        act.follow(fan, star)
    world.start_workers(concurrency=2)
    world.settle(120, "the follows")
    world.service.set_rate(queues.RENAME, 4.0)
    world.env["PINLATER_TYPEAHEAD_RENAME_PAGE"] = "50"  # 7 pages and 6 users' jobs a cluster: 26 jobs at 4 a second
    world.procs.close()
    world.workers.clear()
    world.start_workers(concurrency=2)
    started = time.monotonic()
    act.rename(star, "Throttled Star")
    world.settle(120, "the rename")
    elapsed = time.monotonic() - started
    # 6 pages of followers and their users' jobs, 1 (empty) page of followees.
    assert world.counts()[queues.RENAME]["succeeded"] == 2 * (2 * (300 // 50) + 1)
    assert elapsed >= 5.0, f"26 rename jobs at 4/s took only {elapsed:.1f} s"
    index = ContactsIndex(world.pair)
    assert found(index, fans[7], "throttled") == [("Throttled Star", "following")]
    assert found(index, fans[7], "rate") == []
    assert differences(store, world.pair, [star, *fans[:20]]) == {"primary": 0, "standby": 0}


@pytest.mark.serial_hbase  # stops the standby cluster other tests use
def test_an_outage_of_the_standby_delays_only_its_jobs(world: FeedWorld) -> None:
    """The standby's jobs retry until it answers; the primary's run meanwhile."""
    store, act = world.store, world.contacts
    ann, bob = users(store, "Out Age", "Still Here")
    world.start_workers(concurrency=2)
    services("stop-hbase", STANDBY)
    try:
        act.follow(ann, bob)
        index = ContactsIndex(world.pair)
        deadline = time.monotonic() + 30
        while not found(index, ann, "still") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert found(index, ann, "still") == [("Still Here", "following")]
        # Of the follow's two jobs (one per cluster) only the primary's has
        # ended; the standby's retries, never failing, while the standby is
        # away. Ended jobs stay ended, so these counts cannot miss a job on
        # its way between states, as readings of pending and running can.
        wait_for(lambda: world.counts()[queues.UPDATE]["succeeded"] >= 1, "the primary's job's ACK", timeout_s=30)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            counts = world.counts()[queues.UPDATE]
            assert (counts["succeeded"], counts["failed"]) == (1, 0), counts
            time.sleep(0.5)
    finally:
        services("start-hbase", STANDBY)
    world.settle(120, "the standby's jobs after its outage")
    assert differences(store, world.pair, [ann, bob]) == {"primary": 0, "standby": 0}


@pytest.mark.parametrize("world", ["redis", "redis+contacts"], indirect=True)
def test_a_link_reaches_every_index_holding_the_contact_within_5_s(world: FeedWorld) -> None:
    """Eve's email sits unlinked in two address books (a negative id lookup
    each, cached by the workers); linking it to Eve makes both entries Eve
    (Ann's merges with Eve's following entry) within 5 s with the workers
    running, and unlinking it undoes that as fast."""
    store, act = world.store, world.contacts
    ann, bob, eve = users(store, "Ann Able", "Bob Bright", "Eve Evans")
    world.start_workers(concurrency=2)
    act.follow(ann, eve)
    for owner in (ann, bob):
        act.connect_source(owner, "address_book", [{"name": "Eve from work", "email": "eve@example.com"}])
    world.settle(60, "the follow and the imports")
    index = ContactsIndex(world.pair)

    def eves(owner: int) -> list[tuple[str, int | None, str]]:
        return [(m.contact.name, m.contact.user_id, m.source) for m in index.lookup(owner, "eve").matches]

    assert eves(ann) == [("Eve Evans", eve, "following"), ("Eve from work", None, "address_book")]
    assert eves(bob) == [("Eve from work", None, "address_book")]

    def within_5_s(what: str, done: object) -> float:
        started = time.monotonic()
        while not done():  # type: ignore[operator]
            assert time.monotonic() - started < 5, f"{what}: ann {eves(ann)}, bob {eves(bob)}"
            time.sleep(0.05)
        return time.monotonic() - started

    act.link_account("email:eve@example.com", eve)
    within_5_s("the link", lambda: eves(ann) == [("Eve Evans", eve, "following")]
               and eves(bob) == [("Eve from work", eve, "address_book")])
    assert act.unlink_account("email:eve@example.com") is True
    within_5_s("the unlink", lambda: eves(ann) == [("Eve Evans", eve, "following"),
                                                   ("Eve from work", None, "address_book")]
               and eves(bob) == [("Eve from work", None, "address_book")])
    world.settle(60, "the fix-ups")
    assert world.failed_jobs() == {}
    assert differences(store, world.pair, [ann, bob, eve]) == {"primary": 0, "standby": 0}
    if world.contacts_calls is not None:
        assert world.contacts_calls().get("accountChanged", 0) >= 4  # two changes, a job per cluster each
