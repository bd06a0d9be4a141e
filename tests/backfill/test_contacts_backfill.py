"""The contacts backfill beside real-time typeahead updates (written by the
workers, or through a Contacts Service): Celery workers run the backfill's
page jobs while the application renames users, follows,
unfollows and imports address books through ``ContactActions``; after the
verify pass reports 0 differences on each cluster, the index equals what
MySQL says, checked again independently through lookups."""

from __future__ import annotations

import random
import time

import pytest

from tasks.appdata import contacts
from tasks.backfill import kinds, runs
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.queue import QUEUE
from tasks.backfill.records import Records
from tasks.backfill.verify import verify
from tasks.hbase import PRIMARY, STANDBY
from tasks.typeahead import truth
from tasks.typeahead.index import ContactsIndex
from tests.backfill.helpers import small_graph, wait_finished
from tests.feeds.world import FeedWorld
from tests.support.waits import wait_until

# Tens of seconds a test: started early, so no process is left with one at the end.
pytestmark = pytest.mark.slow

BOTH = (PRIMARY, STANDBY)
SURNAMES = ("Quill", "Rowe", "Stark", "Thorne", "Vance")


@pytest.mark.timeout(600)  # room for both waits' limits on a loaded machine
@pytest.mark.parametrize("world", ["redis", "redis+contacts"], indirect=True)
def test_a_backfill_beside_renames_and_follows_ends_equal_to_mysql_after_verify(world: FeedWorld) -> None:
    summary = small_graph(world.store, seed=31, users=150)
    users = summary.user_ids
    rng = random.Random(8)
    for user in rng.sample(users, 10):  # imported address books, some contacts linked to users
        linked = rng.choice(users)
        contacts.link_account(world.store, f"email:u{linked}@example.com", linked)
        book = [{"name": "Linked Person", "email": f"u{linked}@example.com"},
                {"name": f"Outside {rng.choice(SURNAMES)}", "email": f"x{rng.randrange(10**6)}@example.com"}]
        contacts.put_source(world.store, user, "address_book", book)
    names_before = truth.names_of(world.store, users)
    world.client.set_rate(QUEUE, 15)  # a few seconds of backfill, while the application changes things
    world.start_workers(1, 4)
    started = runs.start(world.store, world.client, "contacts", BOTH, page_size=8)
    records = Records(world.store)
    # The changes start with the backfill's first page, not with the workers'
    # slow start on a loaded machine: changes made before it only add work.
    wait_until(lambda: records.counts(started[0].id).pages_done > 0, 90, what="the backfill's first page")
    act = world.contacts
    followed: list[tuple[int, int]] = []
    # At least 160 changes, and on until three checks (one every tenth
    # change) saw the backfill part-done: it runs beside them however fast
    # or slow the machine is (a fixed count found it finished on a slow one).
    beside = 0
    for step in range(1000):
        if step >= 160 and beside >= 3:
            break
        if step % 10 == 9:
            beside += 0 < records.counts(started[0].id).pages_done < started[0].total_pages
        time.sleep(0.02)
        a, b = rng.sample(users, 2)
        choice = rng.random()
        if choice < 0.35:
            act.follow(a, b)
            followed.append((a, b))
        elif choice < 0.55 and followed:
            act.unfollow(*followed.pop(rng.randrange(len(followed))))
        elif choice < 0.9:
            act.rename(a, f"Renamed{step} {rng.choice(SURNAMES)}")
        else:
            act.connect_source(a, "address_book", [{"name": f"Book{step} Entry", "email": f"b{step}@example.com"}])
    assert beside >= 3, f"the backfill was seen part-done by {beside} checks only"
    wait_finished(world, started, timeout=90, limit=240)
    # Each rename recomputes second_degree lists two hops away: a backlog
    # of a thousand jobs or more, which loaded cores drain slowly.
    world.settle(60, "the typeahead and backfill jobs", limit=300)
    assert world.failed_jobs() == {}
    if world.contacts_calls is not None:  # the pages and the real-time updates went through the service
        calls = world.contacts_calls()
        assert calls.get("rebuild", 0) > 0 and calls.get("followChanged", 0) > 0, calls

    ctx = BackfillContext(world.store, world.pair, world.env)
    for cluster in BOTH:
        rounds = [r.differences for r in verify(ctx, kinds.get("contacts"), cluster, max_rounds=5, page_size=32)]
        assert rounds[-1] == 0, (cluster, rounds)
        print(f"\n{cluster}: differences by verify round {rounds}")

    # Independently of verify: every contact MySQL gives a user is found by
    # its full name in that user's typeahead, in each of its sources.
    index = ContactsIndex(world.pair)
    sample = rng.sample(users, 40)
    expected = truth.entries_of_owners(world.store, sample)
    checked = 0
    for owner in sample:
        for entry in expected[owner]:
            matches = index.lookup(owner, entry.name, limit=100).matches
            hits = [m for m in matches if m.contact.key == entry.key or
                    (entry.user_id is not None and m.contact.user_id == entry.user_id)]
            assert hits and entry.source.name in hits[0].sources, (owner, entry)
            checked += 1
    assert checked > 100
    # Renamed users are no longer found by their old names.
    now = truth.names_of(world.store, users)
    renamed = {u for u in users if now[u].name != names_before[u].name}
    stale_checks = 0
    for owner in sample:
        for entry in expected[owner]:
            if entry.user_id in renamed:
                old = names_before[entry.user_id].name
                assert all(m.contact.user_id != entry.user_id for m in index.lookup(owner, old, limit=100).matches)
                stale_checks += 1
    assert stale_checks > 5
