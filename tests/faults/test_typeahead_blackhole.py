"""The primary HBase cluster black-holed, not stopped, while contacts are
looked up, in process and through the Contacts Service: its Thrift servers
are reached through relays that, during the fault, keep accepting
connections and forward nothing either way, so a lookup's scan goes silent
mid-call. The lookups use the settings' defaults (``standby_after_ms``,
the call timeout). During the fault, more updates of the primary than the
service has call slots are sent through it too, and hang there.

What must hold: no lookup fails; every answer is the index's; during the
fault the standby answers, each lookup within the cut-off plus a margin
(where, asking the standby only once the primary failed, each waited out
the call timeout, and lookups through the service waited for a slot the
hung updates held); after it the primary answers again.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

import contextlib
import threading

import pytest

from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPair, ClusterPool, HBaseSettings
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.runtime import TypeaheadRuntime
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.service import idl as contacts_idl
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.wire import connect
from tests.faults.blackhole import BACK_WITHIN_S, Ask, BlackHole
from tests.typeahead.helpers import follow, users

QUERY = "an"
# A lookup waits the cut-off, then for the standby: on 2 busy cores a
# standby lookup takes up to a few hundred ms.
MARGIN_S = 1.5
# The service's call slots, and the updates of the black-holed primary sent
# through it during the fault: more than it has slots.
SLOTS, UPDATERS = 8, 12


@pytest.mark.serial  # times lookups
def test_lookups_while_the_primary_is_black_holed(appdata: AppData, pair: ClusterPair) -> None:
    me, *friends = users(appdata, "Me Myself", "Ann Archer", "Andy Anders", "Anita Ames")
    for friend in friends:
        follow(appdata, pair, me, friend)
    follow(appdata, pair, friends[0], me)
    settings = TypeaheadSettings.from_env()
    cutoff_s = settings.standby_after_ms / 1000
    assert cutoff_s > 0, "the default asks the standby after a cut-off"
    with BlackHole(pair.primary) as hole:
        assert hole.pool is not None
        # The index closes its pair: the standby's pool is its own.
        standby = ClusterPool.for_cluster("standby", pair.standby.address,
                                          HBaseSettings(table_prefix=pair.standby.table_prefix),
                                          thrift2_address=pair.standby.thrift2_address)
        through_hole = ClusterPair(hole.pool, standby)
        index = ContactsIndex(through_hole, settings)
        first = index.lookup(me, QUERY)
        expected = [(m.contact.name, m.source) for m in first.matches]
        assert len(expected) == 3 and first.served_by == "primary"
        server = ContactsServer(index.lookup, "127.0.0.1", 0, max_concurrent_calls=SLOTS,
                                writer=TypeaheadRuntime(settings, appdata, through_hole)).start()

        def in_process() -> tuple[str, bool]:
            result = index.lookup(me, QUERY)
            return result.served_by, [(m.contact.name, m.source) for m in result.matches] == expected

        def through_service() -> Ask:
            client = connect("127.0.0.1", server.port, timeout_ms=30_000)

            def ask() -> tuple[str, bool]:
                answer = client.lookup(contacts_idl.LookupRequest(owner=me, query=QUERY))
                return answer.servedBy, [(m.contact.name, m.source) for m in answer.matches] == expected
            return ask

        def update_the_primary(over: threading.Event) -> None:
            client = connect("127.0.0.1", server.port, timeout_ms=120_000)
            while not over.is_set():
                with contextlib.suppress(contacts_idl.ContactsException):  # UNAVAILABLE once it gives up
                    client.followChanged("primary", me, friends[1], first_follow)

        first_follow = now_ms()
        try:
            outcome = hole.run([("in process", in_process), ("service", through_service())],
                               beside=[update_the_primary] * UPDATERS)
        finally:
            server.stop()
            index.close()

    during, p99 = outcome.during, outcome.p99_s()
    print("\n" + outcome.summary("lookups"))
    assert outcome.errors == [], outcome.errors[:5]
    assert outcome.wrong == []
    for via in ("in process", "service"):
        assert sum(r.via == via for r in during) >= 4, f"only {len(during)} lookups during the fault"
        assert any(r.via == via and r.served_by == "primary" for r in outcome.after), \
            f"the primary did not answer {via} within {BACK_WITHIN_S:g} s"
    assert all(r.served_by == "standby" for r in during), "an answer from a black-holed cluster"
    # Not only those started in the fault: one under way when it began must
    # move to the standby as soon.
    slow = [(r.via, round(r.started - outcome.fault_from, 2), round(r.latency_s, 2)) for r in outcome.reads
            if r.started < outcome.fault_to - 1.0 and r.latency_s >= cutoff_s + MARGIN_S]
    assert slow == [], f"lookups (via, started after the fault began, s) outlived the cut-off: {slow}"
    assert p99 < cutoff_s + MARGIN_S, f"p99 {p99:.2f} s"
