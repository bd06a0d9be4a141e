"""A rename of an account with many followers (``tests.scale``: 20,000 in
``make test``, 100,000 in ``make soak``) reaches every index that
holds it, through chained rename jobs of 1,000 followers each on both
clusters, and the old name no longer finds the account anywhere; with the
workers' and the renamer's clocks a second off the machine's."""

from __future__ import annotations

import random
import time

import pytest

from tasks.appdata import generate, graph, mappings
from tasks.appdata.generate import GraphSpec
from tasks.appdata.store import now_ms
from tasks.appdata.tables import USER_FOLLOWED_BY_USER
from tasks.hbase import ClusterPair
from tasks.hbase.reads import prefix_filter, scan_range
from tasks.typeahead import queues, truth
from tasks.typeahead.entries import SEPARATOR, TOKEN_FAMILY, WIDE_TABLE
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.writer import put_entries
from tests.feeds.world import FeedWorld, longest_run_ms
from tests.scale import FOLLOWERS
from tests.support.clocks import SKEW_MS
from tests.typeahead.helpers import found


def holders(pair: ClusterPair, cluster: str, token: str, key: str) -> set[int]:
    """Owners whose wide rows hold ``key`` under a token starting with ``token``."""
    out = set()
    for row, columns in scan_range(pair[cluster], WIDE_TABLE, start=b"", stop=b"", columns=[b"c"],
                                   scan_filter=prefix_filter(token.encode()), batch_size=5000):
        if any(c[len(TOKEN_FAMILY):].partition(SEPARATOR)[2] == key.encode() for c in columns):
            out.add(int.from_bytes(row[:8], "big"))
    return out


@pytest.mark.slow
def test_a_rename_of_a_huge_account_reaches_every_index(world: FeedWorld) -> None:
    store = world.store
    spec = GraphSpec(users=FOLLOWERS + 500, boards=0, pins=0, follows_per_user=0.05, board_follows_per_user=0,
                     celebrities=1, celebrity_followers=FOLLOWERS, seed=11)
    star = generate.generate(store, spec).celebrity_ids[0]
    graph.rename_user(store, star, "Oldceleb Starr")
    # The index as it stood before the rename: the star in every follower's "following".
    followers = [e for e in mappings.walk(store, USER_FOLLOWED_BY_USER, star, page_size=10_000)]
    assert len(followers) >= FOLLOWERS
    slots = truth.slots(store, truth.rename_places(star, [e.to_id for e in followers], "followers"))
    entries = [slot.entry for slot in slots.values() if slot.entry is not None]
    for cluster in world.pair:
        put_entries(cluster, entries)
    key = truth.user_key(star)
    fans = {e.to_id for e in followers}
    assert holders(world.pair, "primary", "oldceleb", key) == fans

    # Workers a second ahead of and behind the machine's clock, the rename
    # from an application process a second behind it.
    world.start_workers(2, 1, skews_ms=(SKEW_MS, -SKEW_MS))
    started = time.monotonic()
    world.contacts.rename(star, "Newceleb Starr", at_ms=now_ms() - SKEW_MS)
    counts = world.settle(300, f"the rename of an account with {FOLLOWERS:,} followers")
    elapsed = time.monotonic() - started

    assert world.failed_jobs() == {}
    follower_pages = -(-len(fans) // 1000)  # then one page of followees, on each cluster
    # Each page and its users' job (the followees' page is empty), on each cluster.
    assert counts[queues.RENAME]["succeeded"] == 2 * (2 * follower_pages + 1)
    for side in ("primary", "standby"):
        assert holders(world.pair, side, "oldceleb", key) == set(), f"{side}: the old name still finds"
        assert holders(world.pair, side, "newceleb", key) == fans, f"{side}: the new name is not everywhere"
        assert holders(world.pair, side, "starr", key) == fans
    index = ContactsIndex(world.pair)
    for fan in random.Random(5).sample(sorted(fans), 20):
        assert ("Newceleb Starr", "following") in found(index, fan, "newceleb"), fan
        assert all(name != "Oldceleb Starr" for name, _ in found(index, fan, "oldceleb starr"))
    longest = longest_run_ms(world.statuses(queues.RENAME))
    print(f"\nrename: {len(fans):,} indexes x 2 clusters in {elapsed:.1f} s; longest page {longest} ms")
    # The work was chained in pages of 1,000 (the count of rename jobs
    # above), whatever each page's run time on a loaded host; each run's
    # time was recorded in its status.
    assert longest > 0
