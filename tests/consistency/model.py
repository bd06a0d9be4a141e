"""The consistency model: random application actions (pins, follows and
unfollows of users and boards, renames, contact imports, links and unlinks
of the imported contacts' accounts to users, trims, flushes
and major compactions of the feed table, which its coprocessor trims),
stretches of them in one millisecond (a frozen clock) or from processes
whose clocks are up to ``SKEW_MS`` ahead of or behind the machine's, and a
random schedule for the jobs they make (claimed, started, stepped one store call
at a time, interleaved, run twice at once, crashed mid-way and run again,
a cluster down for a while, backfill pages and verify passes racing them,
each run on a worker whose clock is off by up to ``SKEW_MS`` either way),
then every job drained and every feed and index of the example's users
compared, on both clusters, with the oracle computed from MySQL alone;
and MySQL compared with what the actions said, the last one winning.

Hypothesis draws the rules and shrinks a failing example to a short list
of them; the drain at the end is deterministic (newest work first).
"""

from __future__ import annotations

import os
import uuid
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pinlater.models import Job
from tasks.appdata import contacts, graph, objects
from tasks.appdata.ids import ObjectType
from tasks.appdata.store import now_ms
from tasks.backfill import kinds
from tasks.feeds import queues as feed_queues
from tasks.feeds.trim import TrimJob
from tasks.hbase import PRIMARY, STANDBY
from tests.consistency import oracle
from tests.consistency.rig import TRIM_CAP, Rig
from tests.support import clocks

NAMES = ("Ann Lee", "Anna Li", "Bo Chen", "Li Ann", "Cy Young", "Ann", "Bo Li Ann", "Dee Ray")
CONTACT_NAMES = ("Dee Ray", "Ann Lee", "Eve Li", "Bo", "Ann Ray", "Cy")
FROZEN_MAX_MS = 1000
# How far the clocks of the application's processes and of the workers may
# be off the machine's, either way (NTP on a bad day; docs/typeahead.md
# says what a skew past the typeahead's CLOCK_MARGIN_MS costs).
SKEW_MS = int(os.environ.get("PINLATER_CONSISTENCY_SKEW_MS", str(clocks.SKEW_MS)))
USERS = 4  # few: actions on the same follows and pins collide often
BOARDS_OF = (2, 1, 1, 0)  # boards per user: the last only follows
CLUSTERS = (PRIMARY, STANDBY)
SOURCES = ("address_book", "social")
KINDS = ("feeds", "contacts", "second_degree")  # backfill kinds

user = st.integers(0, USERS - 1)
anything = st.integers(0, 15)  # an index, taken modulo what is there
skew = st.integers(-SKEW_MS, SKEW_MS)  # a process's clock, off the machine's by this many ms


class Model(RuleBasedStateMachine):
    rig: ClassVar[Rig]
    check_versions: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.users: list[int] = []
        self.boards: list[int] = []
        self.owner: dict[int, int] = {}
        self.emails: list[str] = []
        self.clock = 0
        self.frozen = False
        self.skew = 0  # the clock of the process making the actions, off the machine's
        self.trimmed: set[int] = set()
        self.unfollowed: set[int] = set()
        # What the actions said, in the order they were made: MySQL must
        # end up holding it (the index is compared with MySQL).
        self.names: dict[int, str] = {}
        self.imports: dict[tuple[int, str], tuple[contacts.ContactRecord, ...]] = {}
        self.follows: set[tuple[int, int]] = set()
        self.links: dict[str, int | None] = {}  # account: its user, None once unlinked
        self.compacted = False  # a compaction trimmed (or may have trimmed) every feed of the example

    def now(self) -> int:
        """Action times: the wall clock, strictly increasing across the
        example, except while the clock is frozen: then every action takes
        the same millisecond (the app data must still order them as they
        came), until the wall clock is ``FROZEN_MAX_MS`` past it (times are
        taken just before their writes, well within ``CLOCK_MARGIN_MS``);
        all off by the acting process's skew, so a later action may ask
        for an earlier time."""
        if not self.frozen or now_ms() - self.clock >= FROZEN_MAX_MS:
            self.clock = max(now_ms(), self.clock + 1)
        return self.clock + self.skew

    def note(self, line: str) -> None:
        self.rig.log.append(line)

    # ------------------------------------------------------------ the world
    @initialize(order=st.integers(0, 1 << 32), frozen=st.booleans())
    def world(self, order: int, frozen: bool) -> None:
        rig = self.rig
        self.frozen = frozen
        rig.max_skew_ms = SKEW_MS
        rig.log.clear()
        rig.broken = False
        # Whatever an earlier failed example left in the queues goes: every
        # replay of an example must start from the same state.
        rig.reset_queues()
        store = rig.store
        shards = sorted(store.shard_map.shards)
        tag = uuid.uuid4().hex[:8]
        for i in range(USERS):
            made = graph.create_user(store, {"name": NAMES[i]}, shard=shards[i % len(shards)], created_at_ms=self.now())
            self.users.append(made.id)
            for j in range(BOARDS_OF[i]):
                board = graph.create_board(store, made.id, {"name": f"b{j}"}, created_at_ms=self.now()).id
                self.boards.append(board)
                self.owner[board] = made.id
        self.emails = [f"c{i}.{tag}@example.com" for i in range(len(CONTACT_NAMES))]
        # Two imported contacts are users of the example (their entries carry the user id).
        contacts.link_account(store, f"email:{self.emails[1]}", self.users[1])
        contacts.link_account(store, f"social:x1{tag}", self.users[2])
        self.links = {f"email:{self.emails[1]}": self.users[1], f"social:x1{tag}": self.users[2]}
        self.tag = tag
        self.order = order  # of the jobs the final drain runs

    # ------------------------------------------------------------ application actions
    @rule(b=anything, title=st.integers(0, 9))
    def pin(self, b: int, title: int) -> None:
        board = self.boards[b % len(self.boards)]
        made = self.rig.feeds.create_pin(self.owner[board], board, {"title": f"t{title}"}, created_at_ms=self.now())
        self.note(f"pin {made.id} by {self.owner[board]} on {board}")

    @rule(a=user, b=user)
    def follow_user(self, a: int, b: int) -> None:
        if a != b:
            self.rig.contacts.follow(self.users[a], self.users[b], at_ms=self.now())
            self.follows.add((self.users[a], self.users[b]))
            self.note(f"{self.users[a]} follows user {self.users[b]}")

    @rule(a=user, b=user, c=user, between=st.booleans())
    def follow_path(self, a: int, b: int, c: int, between: bool) -> None:
        """Two follows, a to b then b to c: a path that gives a a second_degree
        contact. ``between``: every due job runs between them, a's own
        recompute among them, so only b's chain, through its followers, can."""
        self.follow_user(a, b)
        if between:
            self.rig.claim()
            while self.rig.waiting:
                self.rig.run_now(0)
        self.follow_user(b, c)

    @rule(a=user, b=user)
    def unfollow_user(self, a: int, b: int) -> None:
        if a != b:
            self.rig.contacts.unfollow(self.users[a], self.users[b], at_ms=self.now())
            self.follows.discard((self.users[a], self.users[b]))
            self.unfollowed.add(self.users[a])
            self.note(f"{self.users[a]} unfollows user {self.users[b]}")

    @rule(a=user, b=anything)
    def follow_board(self, a: int, b: int) -> None:
        board = self.boards[b % len(self.boards)]
        self.rig.feeds.follow(self.users[a], board, at_ms=self.now())
        self.follows.add((self.users[a], board))
        self.note(f"{self.users[a]} follows board {board}")

    @rule(a=user, b=anything)
    def unfollow_board(self, a: int, b: int) -> None:
        board = self.boards[b % len(self.boards)]
        self.rig.feeds.unfollow(self.users[a], board, at_ms=self.now())
        self.follows.discard((self.users[a], board))
        self.unfollowed.add(self.users[a])
        self.note(f"{self.users[a]} unfollows board {board}")

    @rule(u=user, name=st.integers(0, len(NAMES) - 1))
    def rename(self, u: int, name: int) -> None:
        self.rig.contacts.rename(self.users[u], NAMES[name], at_ms=self.now())
        self.names[self.users[u]] = NAMES[name]
        self.note(f"{self.users[u]} renamed {NAMES[name]!r}")

    @rule(u=user, source=st.sampled_from(SOURCES), mask=st.integers(0, (1 << len(CONTACT_NAMES)) - 1))
    def import_contacts(self, u: int, source: str, mask: int) -> None:
        chosen = [i for i in range(len(CONTACT_NAMES)) if mask >> i & 1]
        if source == "address_book":
            records = [{"name": CONTACT_NAMES[i], "email": self.emails[i]} for i in chosen]
        else:
            records = [{"name": CONTACT_NAMES[i], "external_id": f"x{i}{self.tag}"} for i in chosen]
        self.rig.contacts.connect_source(self.users[u], source, records, at_ms=self.now())
        self.imports[(self.users[u], source)] = contacts.parse_contacts(records)
        self.note(f"{self.users[u]} imports {source} {chosen}")

    @rule(c=st.integers(0, len(CONTACT_NAMES) - 1), u=user, kind=st.sampled_from(("email", "social")),
          link=st.booleans())
    def link_account(self, c: int, u: int, kind: str, link: bool) -> None:
        """An imported contact's email or social account is linked to a
        user (moved, if it was another's), or unlinked."""
        account = f"email:{self.emails[c]}" if kind == "email" else f"social:x{c}{self.tag}"
        if link:
            self.rig.contacts.link_account(account, self.users[u])
        else:
            self.rig.contacts.unlink_account(account)
        self.links[account] = self.users[u] if link else None
        self.note(f"{account} {'linked to ' + str(self.users[u]) if link else 'unlinked'}")

    @rule(frozen=st.booleans())
    def freeze_clock(self, frozen: bool) -> None:
        """Freezes the actions' clock (the next actions share a millisecond), or lets it run."""
        if frozen and not self.frozen:
            self.now()  # a millisecond of its own, after the actions before
        self.frozen = frozen
        self.note(f"clock {'frozen' if frozen else 'running'}")

    @rule(ms=skew)
    def skew_clock(self, ms: int) -> None:
        """The next actions come from a process whose clock is ``ms`` off the machine's."""
        self.skew = ms
        self.note(f"actions' clock {ms:+d} ms")

    @rule(u=user, cluster=st.sampled_from(CLUSTERS))
    def trim(self, u: int, cluster: str) -> None:
        """A trim job to a small cap, scheduled like any other job, racing fan-outs and follows."""
        job = TrimJob(self.users[u], cluster, TRIM_CAP)
        self.rig.client.enqueue(feed_queues.TRIM, [Job(job.to_json().encode())])
        self.trimmed.add(self.users[u])
        self.note(f"trim {self.users[u]} on {cluster} to {TRIM_CAP}")

    # ------------------------------------------------------------ the schedule
    @rule(cluster=st.sampled_from(CLUSTERS), what=st.integers(0, 24))
    def compaction(self, cluster: str, what: int) -> None:
        """Now and then (most draws do nothing: each costs HBase real
        work) a flush of the feed table, or a major compaction, which the
        coprocessor trims to TRIM_CAP, between two store calls of the jobs."""
        if what > 1:
            return
        self.rig.compact(cluster, major=what == 1)
        self.compacted = True  # a flush may start a minor compaction of HBase's own, which may trim too
        self.note(f"{'major compaction' if what else 'flush'} of the feed table on {cluster}")

    @rule()
    def claim(self) -> None:
        self.rig.claim()

    @rule(i=anything, ms=skew)
    def start(self, i: int, ms: int) -> None:
        self.rig.start(i, ms)

    @rule(i=anything, ms=skew)
    def run(self, i: int, ms: int) -> None:
        self.rig.run_now(i, ms)

    @rule(i=anything, count=st.integers(1, 4))
    def step(self, i: int, count: int) -> None:
        self.rig.step(i, count)

    @rule(i=anything)
    def finish(self, i: int) -> None:
        self.rig.finish(i)

    @rule(i=anything)
    def crash(self, i: int) -> None:
        self.rig.crash(i)

    @rule(cluster=st.sampled_from(CLUSTERS), down=st.booleans())
    def outage(self, cluster: str, down: bool) -> None:
        (self.rig.faults.down.add if down else self.rig.faults.down.discard)(cluster)
        self.note(f"{cluster} {'down' if down else 'up'}")

    @rule(kind=st.sampled_from(KINDS), cluster=st.sampled_from(CLUSTERS),
          mask=st.integers(1, (1 << USERS) - 1), ms=skew)
    def backfill_page(self, kind: str, cluster: str, mask: int, ms: int) -> None:
        """A page of a backfill run, racing the real-time jobs."""
        users = [u for i, u in enumerate(self.users) if mask >> i & 1]
        ctx = self.rig.ctx
        self.rig.start_pseudo(f"backfill {kind} {cluster} {users}",
                              lambda: kinds.get(kind).backfill(ctx, cluster, users), ms)

    @rule(kind=st.sampled_from(KINDS), cluster=st.sampled_from(CLUSTERS), ms=skew)
    def verify_page(self, kind: str, cluster: str, ms: int) -> None:
        """A page of a verify round (compare, then repair), racing the real-time jobs."""
        ctx, users = self.rig.ctx, list(self.users)

        def work() -> int:
            found = kinds.get(kind).diff(ctx, cluster, users)
            return kinds.get(kind).repair(ctx, cluster, found, 1) if found else 0

        self.rig.start_pseudo(f"verify {kind} {cluster}", work, ms)

    @invariant()
    def nothing_stuck(self) -> None:
        assert len(self.rig.active) < 200, "too many runs in flight"

    # ------------------------------------------------------------ the end
    def lost_actions(self) -> list[str]:
        """Where MySQL does not hold what the actions said, the last one
        winning (the oracle of the indexes reads MySQL, so an action lost
        there would be lost from them too, unseen)."""
        store, out = self.rig.store, []
        for made in objects.get_many(store, self.users, ObjectType.USER):
            want = self.names.get(made.id, NAMES[self.users.index(made.id)])
            if graph.name_of(made)[0] != want:
                out.append(f"user {made.id} is named {graph.name_of(made)[0]!r}, last renamed {want!r}")
        stored = {(i.user_id, i.source): i.contacts for imps in contacts.sources_of(store, self.users).values()
                  for i in imps}
        for (owner, source), records in sorted(self.imports.items()):
            if stored.get((owner, source)) != records:
                out.append(f"{owner}'s {source} holds {stored.get((owner, source))}, last imported {records}")
        linked = contacts.resolve_accounts(store, self.links)
        for account, user_id in sorted(self.links.items()):
            if linked.get(account) != user_id:
                out.append(f"{account} is linked to {linked.get(account)}, the actions said {user_id}")
        for a in self.users:
            for b in self.users + self.boards:
                follows = a != b and graph.follow_time(store, a, b) is not None
                if follows != ((a, b) in self.follows):
                    out.append(f"{a} follows {b}: {follows}, the actions said {not follows}")
        return out

    def teardown(self) -> None:
        rig = self.rig
        if rig.broken or not self.users:  # a rule failed: that failure is the report
            rig.abandon()
            return
        try:
            rig.drain(self.order)
        except BaseException:
            rig.abandon()
            raise
        recent = rig.feed_settings.recent_pins
        # A compaction may have trimmed any feed (HBase also starts minor
        # ones after flushes); a trim job, its user's.
        trimmed = {u: (TRIM_CAP, u in self.unfollowed) for u in (self.users if self.compacted else self.trimmed)}
        found = self.lost_actions()
        found += oracle.feed_differences(rig.store, rig.pair, self.users, recent, versions=self.check_versions,
                                         trimmed=trimmed)
        t = rig.typeahead_settings
        found += oracle.index_differences(rig.store, rig.pair, self.users, self.users,
                                          (t.second_followees, t.second_per_followee, t.second_cap))
        if found:
            raise AssertionError("\n".join(["the feeds and indexes differ from the truth:", *found,
                                            "what ran (last 60):", *rig.log[-60:]]))
