"""The two ways of reading what an index place should hold agree: a whole
owner's truth (``truth.owners_truth``, what a backfill page reads) and the
lookup of each place (``truth.slots``, what the jobs read), over random
follow graphs, renames and imports in real MariaDB, for every place the
truth fills and for absent ones (unfollowed, never followed, keys naming no
contact, an import's dropped contacts)."""

from __future__ import annotations

import random

import pytest

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData, now_ms
from tasks.typeahead import truth
from tasks.typeahead.sources import ADDRESS_BOOK, FOLLOWERS, FOLLOWING, MUTUAL, SOCIAL
from tasks.typeahead.truth import Place, user_key
from tests.typeahead.helpers import users


def _world(store: AppData, rng: random.Random) -> tuple[list[int], list[Place]]:
    """Six users with random follows, unfollows, renames and imports; the
    places to ask about (filled or not)."""
    ids = users(store, "Ann Archer", "Bob Baker", "Cy Cole", "Di Dunn", "Ed Eve", "Flo Fay")
    at = now_ms() - 1_000_000
    for _ in range(40):
        a, b = rng.sample(ids, 2)
        at += rng.randrange(1, 5_000)
        step = rng.random()
        if step < 0.6:
            graph.follow_user(store, a, b, at_ms=at)
        elif step < 0.85:
            graph.unfollow_user(store, a, b)
        else:
            graph.rename_user(store, a, rng.choice(["Al Ash", "Bo Bay", "Cat Cox"]), at_ms=at)
    emails = [f"c{i}.{rng.randrange(10**9)}@example.com" for i in range(4)]
    contacts.link_account(store, f"email:{emails[0]}", ids[1])
    for owner in rng.sample(ids, 3):
        picked = [e for e in emails if rng.random() < 0.6]
        records = [{"name": f"Pal {e[:2]}", "email": e} for e in picked]
        contacts.put_source(store, owner, ADDRESS_BOOK.name, records, at_ms=at + rng.randrange(1, 1000))
    places: list[Place] = []
    for owner in ids:
        for source in (FOLLOWING, FOLLOWERS, MUTUAL):
            places += [(owner, source, user_key(other)) for other in ids if other != owner]
        places += [(owner, FOLLOWING, "u:nobody"), (owner, FOLLOWERS, "e:someone@example.com"),
                   (owner, SOCIAL, "x:42")]
        places += [(owner, ADDRESS_BOOK, f"e:{e}") for e in emails]
    rng.shuffle(places)
    return ids, places


@pytest.mark.parametrize("seed", range(6))
def test_a_whole_owners_read_says_what_each_places_lookup_says(appdata: AppData, seed: int) -> None:
    rng = random.Random(seed)
    owners, places = _world(appdata, rng)
    at_ms = rng.choice([None, now_ms()])
    whole = truth.owners_truth(appdata, owners)
    assert whole.slots(places, at_ms) == truth.slots(appdata, places, at_ms)
    filled = [p for p, slot in truth.slots(appdata, places).items() if slot.entry is not None]
    assert filled and sorted(whole.places(), key=repr) == sorted(filled, key=repr)
    assert whole.by_owner == truth.entries_of_owners(appdata, owners)


def test_a_place_of_an_owner_not_read_is_refused(appdata: AppData) -> None:
    ann, bob = users(appdata, "Ann Archer", "Bob Baker")
    with pytest.raises(ValueError, match=f"place of owner {bob} outside the owners read"):
        truth.owners_truth(appdata, [ann]).slots([(bob, FOLLOWING, user_key(ann))])
