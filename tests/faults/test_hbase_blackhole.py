"""The primary HBase cluster black-holed, not stopped, while feeds are read:
its Thrift servers are reached through relays that, during the fault,
keep accepting connections and forward nothing either way, so pooled
connections go silent mid-call and new ones connect into silence. Readers
on a few threads read one feed all along, with the settings' cut-off and
call timeout.

What must hold: no read fails; every page is the feed; during the fault
the standby serves, each read within the cut-off plus a margin (the
speculative read, then once the primary's threads are all waiting, reads
that skip it); after it the primary serves again.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

import pytest

from tasks.appdata.store import AppData
from tasks.feeds.read import FeedReader
from tasks.feeds.settings import FeedSettings
from tasks.hbase import ClusterPair
from tests.faults.blackhole import BACK_WITHIN_S, BlackHole
from tests.faults.hosts import FAULT_S
from tests.feeds.helpers import feed_of

READERS = 4
# A read waits the cut-off, then for the standby: on 2 busy cores a
# standby read takes up to a few hundred ms.
MARGIN_S = 1.5


@pytest.mark.serial  # times reads
def test_feed_reads_while_the_primary_is_black_holed(appdata: AppData, pair: ClusterPair) -> None:
    follower, newest_first = feed_of(appdata, pair, 5)
    cutoff_s = FeedSettings().read_cutoff_ms / 1000
    with BlackHole(pair.primary) as hole:
        assert hole.pool is not None
        reader = FeedReader(ClusterPair(hole.pool, pair.standby), appdata, cutoff_s=cutoff_s)

        def read() -> tuple[str, bool]:
            page = reader.read(follower, None, 10)
            return page.served_by, [p.id for p in page.pins] == newest_first

        try:
            outcome = hole.run([("reader", read)] * READERS)
        finally:
            reader.close()

    during, p99 = outcome.during, outcome.p99_s()
    print("\n" + outcome.summary("reads"))
    assert outcome.errors == [], outcome.errors[:5]
    assert outcome.wrong == []
    assert len(during) >= READERS * (FAULT_S - 1.0), f"only {len(during)} reads during the fault"
    assert all(r.served_by == "standby" for r in during), "a read from a black-holed cluster"
    assert p99 < cutoff_s + MARGIN_S, f"p99 {p99:.2f} s"
    assert any(r.served_by == "primary" for r in outcome.after), \
        f"the primary did not serve within {BACK_WITHIN_S:g} s"
