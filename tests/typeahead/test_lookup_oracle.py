"""The lookup oracle, over Thrift: random follows, unfollows, renames,
imports, links and unlinks change MySQL, and their updates run through the
Contacts Service in a random order (each one late, and beside the others'),
on both clusters; then every lookup a user could type (each token's first
letters, two-token queries, every single source and random sets of them as
filters) answers through the service exactly what ranking the owner's
entries computed from MySQL alone would, with its second_degree contacts
counted from the follows by the consistency oracle: the same contacts,
names, users, sources and scores, in the same order.

``PINLATER_LOOKUP_ORACLE_EXAMPLES`` (default 12) sizes it.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import PRIMARY, STANDBY, ClusterPair
from tasks.typeahead import truth
from tasks.typeahead.entries import Entry
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.jobs import SecondJob
from tasks.typeahead.rank import Candidate, Contact, rank
from tasks.typeahead.runtime import TypeaheadRuntime
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.service import idl as contacts_idl
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import SOURCES
from tasks.typeahead.tokens import tokenize
from tasks.typeahead.wire import second_page_of
from tests.consistency.oracle import expected_second
from tests.typeahead.test_index import contacts_client

EXAMPLES = int(os.environ.get("PINLATER_LOOKUP_ORACLE_EXAMPLES", "12"))
USERS = 5
NAMES = ("Ann Lee", "Anna Li", "Bo Chen", "Li Ann", "Cy Young", "Ann", "Dee Ray", "Bo Li Ann")
CONTACT_NAMES = ("Dee Ray", "Ann Lee", "Eve Li", "Bo", "Ann Ray", "Cy")
CLUSTERS = (PRIMARY, STANDBY)
LIMIT = 100

user = st.integers(0, USERS - 1)
action = st.one_of(
    st.tuples(st.just("follow"), user, user),
    st.tuples(st.just("path"), user, user, user),
    st.tuples(st.just("unfollow"), user, user),
    st.tuples(st.just("rename"), user, st.integers(0, len(NAMES) - 1)),
    st.tuples(st.just("import"), user, st.sampled_from(("address_book", "social")),
              st.integers(0, (1 << len(CONTACT_NAMES)) - 1)),
    st.tuples(st.just("link"), st.integers(0, len(CONTACT_NAMES) - 1), user, st.booleans()),
)


# Rename, account and second_degree pages of one: every chain is several
# calls; second_degree counts 3 followees' 3 newest follows, keeping 3.
SETTINGS = TypeaheadSettings(rename_page=1, account_page=1, second_page=1, second_followees=3,
                             second_per_followee=3, second_cap=3)


@pytest.fixture(scope="module")
def service(appdata: AppData, pair: ClusterPair) -> Iterator[tuple[ContactsServer, Any]]:
    writer = TypeaheadRuntime(SETTINGS, appdata, pair)
    server = ContactsServer(ContactsIndex(pair, SETTINGS).lookup, "127.0.0.1", 0, writer=writer).start()
    client = contacts_client(server)
    yield server, client
    client.close()
    server.stop(grace_s=2)


@pytest.fixture(scope="module")
def met() -> Iterator[dict[str, int]]:
    """The second_degree contacts the examples' oracles held, all told: the
    examples must have met some, or they checked nothing of that source."""
    tally = {"second_degree": 0}
    yield tally
    assert tally["second_degree"] > 0, "no example had a second_degree contact"


class World:
    """One example: its users, and the updates its actions owe, run later in a random order."""

    def __init__(self, store: AppData, client: Any, shuffle: random.Random) -> None:
        self.store, self.client, self.shuffle = store, client, shuffle
        shards = sorted(store.shard_map.shards)
        self.users = [graph.create_user(store, {"name": NAMES[i]}, shard=shards[i % len(shards)]).id
                      for i in range(USERS)]
        self.tag = uuid.uuid4().hex[:8]
        self.owed: list[Callable[[], None]] = []
        # One follow no action can undo, so that some lookups always find someone.
        anchor = graph.create_user(store, {"name": "Ann Anchor"}, shard=shards[0]).id
        self.act_follow(self.users[0], anchor, now_ms())

    def account(self, contact: int) -> str:
        return f"email:c{contact}.{self.tag}@example.com"

    def owe(self, *calls: Callable[[], None]) -> None:
        self.owed += calls
        while self.owed and self.shuffle.random() < 0.4:  # some run now, in any order, late ones too
            self.owed.pop(self.shuffle.randrange(len(self.owed)))()

    def drain(self) -> None:
        while self.owed:
            self.owed.pop(self.shuffle.randrange(len(self.owed)))()

    def chain(self, cluster: str, first: Any, call: Callable[[str, Any], Any]) -> Callable[[], None]:
        def run() -> None:
            pages = [first]
            while pages:
                page = pages.pop()
                step = call(cluster, page)
                pages += [p for p in (getattr(step, "usersPage", None), step.nextPage) if p is not None]
                # A rename's users page names the followers whose followers' second_degree lists show the name.
                for actor in getattr(step, "secondActors", None) or ():
                    renamed = second_page_of(SecondJob.renaming(cluster, actor, page.userId, page.nameAt))
                    self.owe(self.chain(cluster, renamed, self.client.secondPage))

        return run

    def act_follow(self, a: int, b: int, at: int) -> None:
        graph.follow_user(self.store, a, b, at_ms=at)
        self.owe(*[lambda c=c: self.client.followChanged(c, a, b, at) for c in CLUSTERS])
        self.owe_second(a, at)

    def owe_second(self, actor: int, at: int) -> None:
        page = contacts_idl.SecondPage(userId=actor, atMs=at, change=uuid.uuid4().hex)
        self.owe(*[self.chain(c, page, self.client.secondPage) for c in CLUSTERS])

    def act(self, what: tuple[Any, ...]) -> None:
        store, client, u = self.store, self.client, self.users
        kind = what[0]
        if kind == "path":  # a follows b, b follows c: a second_degree contact for a
            a, b, c = (u[i] for i in what[1:])
            if len({a, b, c}) == 3:
                self.act_follow(a, b, now_ms())
                self.act_follow(b, c, now_ms())
        elif kind in ("follow", "unfollow"):
            a, b = u[what[1]], u[what[2]]
            if a == b:
                return
            if kind == "follow":
                self.act_follow(a, b, now_ms())
            else:
                at = graph.unfollow_clock(store, a, b, None)
                graph.unfollow_user(store, a, b)
                self.owe(*[lambda c=c: client.followChanged(c, a, b, at) for c in CLUSTERS])
                self.owe_second(a, at)
        elif kind == "rename":
            _old, _new, at = graph.rename_user(store, u[what[1]], NAMES[what[2]])
            page = contacts_idl.RenamePage(userId=u[what[1]], nameAt=at, phase="followers")
            self.owe(*[self.chain(c, page, client.renamePage) for c in CLUSTERS])
        elif kind == "import":
            _kind, owner, source, mask = what
            chosen = [i for i in range(len(CONTACT_NAMES)) if mask >> i & 1]
            records = [{"name": CONTACT_NAMES[i], "email": self.account(i).removeprefix("email:")} for i in chosen]
            contacts.put_source(store, u[owner], source, records)
            self.owe(*[lambda c=c: client.sourceChanged(c, u[owner], source) for c in CLUSTERS])
        else:
            _kind, contact, owner, link = what
            if link:
                contacts.link_account(store, self.account(contact), u[owner])
            else:
                contacts.unlink_account(store, self.account(contact))
            page = contacts_idl.AccountPage(account=self.account(contact), change=uuid.uuid4().hex)
            self.owe(*[self.chain(c, page, client.accountChanged) for c in CLUSTERS])


def oracle(entries: list[Entry], second: list[Candidate], query: str, sources: frozenset[str] | None
           ) -> list[tuple[Any, ...]]:
    """The ranked matches of an owner's entries and second_degree contacts as MySQL alone makes them."""
    candidates = [Candidate(e.source.name, Contact(e.key, e.name, e.user_id)) for e in entries]
    candidates = [c for c in candidates + second if sources is None or c.source in sources]
    order = TypeaheadSettings().source_order
    return [(m.contact.key, m.contact.name, m.contact.user_id, m.source, tuple(m.sources), m.score)
            for m in rank(query, candidates, order, LIMIT)]


def queries() -> list[str]:
    tokens = sorted({t for name in NAMES + CONTACT_NAMES for t in tokenize(name)})
    singles = sorted({t[:n] for t in tokens for n in (1, 2)} | set(tokens))
    return [*singles, "ann l", "l a", "bo li", "a a"]


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(action, min_size=4, max_size=24), seed=st.integers(0, 1 << 32),
       filters=st.lists(st.sets(st.sampled_from([s.name for s in SOURCES]), min_size=1), max_size=3))
def test_every_lookup_over_thrift_equals_the_oracle(
    appdata: AppData, service: tuple[ContactsServer, Any], met: dict[str, int], actions: list[tuple[Any, ...]],
    seed: int, filters: list[set[str]],
) -> None:
    _server, client = service
    world = World(appdata, client, random.Random(seed))
    for what in actions:
        world.act(what)
    world.drain()
    asked: list[frozenset[str] | None] = [None, *[frozenset([s.name]) for s in SOURCES],
                                          *[frozenset(f) for f in filters]]
    wrong, matched = [], 0
    entries = truth.entries_of_owners(appdata, world.users)
    second = expected_second(appdata, world.users,
                             (SETTINGS.second_followees, SETTINGS.second_per_followee, SETTINGS.second_cap))
    seconds = {o: [Candidate("second_degree", Contact(f"u:{u}", name, u), n) for u, n, name in listed]
               for o, listed in second.items()}
    for owner in world.users:
        for query in queries():
            for sources in asked:
                want = oracle(entries.get(owner, []), seconds[owner], query, sources)
                got = client.lookup(contacts_idl.LookupRequest(
                    owner=owner, query=query, limit=LIMIT, sources=None if sources is None else sorted(sources)))
                found = [(m.contact.key, m.contact.name, m.contact.userId, m.source, tuple(m.sources), m.score)
                         for m in got.matches]
                matched += bool(found)
                if found != want:
                    wrong.append(f"owner {owner} {query!r} {sorted(sources or [])}: got {found}, want {want}")
    assert not wrong, "\n".join(wrong[:10])
    assert matched, "no lookup found anything: the names and queries no longer meet"
    met["second_degree"] += sum(map(len, second.values()))
