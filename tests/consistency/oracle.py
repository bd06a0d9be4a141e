"""What every feed and typeahead index of a set of users should hold,
computed from the app data in MySQL alone, and the differences from what
each HBase cluster holds.

Written apart from the code under test (it reads MySQL with the app data's
plain readers and lays out nothing through ``tasks.feeds`` or
``tasks.typeahead``), so a wrong rule there cannot make it agree.

**Feeds.** A user's feed holds, for every account or board F they follow
now (followed at time t, the edge's sequence): F's newest ``recent`` pins
created at or before t, and every pin of F created after t. Each such pin's
cell carries t as its version; a pin reached through two follows shows the
newer one.

**Typeahead.** Per owner: ``following`` holds every user the owner follows,
``followers`` every user following the owner, ``mutual`` the users both
ways; each with the contact's current name, at version max(follow
time(s), the contact's ``name_at``). Each imported source holds its
import's contacts at the import's time, with the user id its email or
external account links to. Every entry has one token cell per token of its
name and a member record listing those tokens, all at its version; no
other cell. ``second_degree``: the users followed by the owner's
``followees`` newest followees (each's ``per_followee`` newest follows
counted), counted, without the owner and anyone it follows, most first
then by id, ``cap`` of them, each with its current name, as one list cell.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.appdata import contacts, mappings, objects
from tasks.appdata.ids import ObjectType
from tasks.appdata.store import AppData
from tasks.appdata.tables import BOARD_HAS_PINS, USER_FOLLOWS_BOARD, USER_FOLLOWS_USER, USER_HAS_PINS
from tasks.hbase import ClusterPair, ClusterPool
from tasks.typeahead.tokens import tokenize

FEED_TABLE = "following_feed"
WIDE_TABLE = "typeahead_wide"
TALL_TABLE = "typeahead_tall"
SECOND_TABLE = "typeahead_second"
SOURCE_CODES = {1: "mutual", 2: "following", 3: "followers", 4: "social", 5: "address_book"}
TALL_SOURCES = {"followers"}


def feed_row(user: int) -> bytes:
    return f"{user:019d}".encode()


def pin_of_column(column: bytes) -> int:
    """The pin id in a feed column ``feed:<13 digits reversed ms><19 digits reversed id>``."""
    qualifier = column.split(b":", 1)[1]
    return (10**19 - 1) - int(qualifier[13:])


# ------------------------------------------------------------------ feeds


def expected_feed(store: AppData, user: int, recent: int) -> dict[int, set[int]]:
    """pin id -> the versions (follow times) it is in the feed under."""
    out: dict[int, set[int]] = defaultdict(set)
    for follows, has_pins in ((USER_FOLLOWS_USER, USER_HAS_PINS), (USER_FOLLOWS_BOARD, BOARD_HAS_PINS)):
        for edge in mappings.walk(store, follows, user):
            pins = list(mappings.walk(store, has_pins, edge.to_id))  # newest first; sequence = created_at
            up_to = [p for p in pins if p.sequence <= edge.sequence][:recent]
            after = [p for p in pins if p.sequence > edge.sequence]
            for p in up_to + after:
                out[p.to_id].add(edge.sequence)
    return dict(out)


def feed_cells(pool: ClusterPool, user: int) -> dict[int, int]:
    """pin id -> the timestamp of its visible cell, on one cluster."""

    def work(connection: Any) -> dict[bytes, tuple[bytes, int]]:
        return dict(connection.table(FEED_TABLE).row(feed_row(user), include_timestamp=True))

    return {pin_of_column(c): ts for c, (_v, ts) in pool.run(f"oracle: feed of {user}", work).items()}


def newest(pins: Iterable[int], store: AppData, count: int) -> set[int]:
    """The ``count`` newest of ``pins`` in feed order (creation time, then id)."""
    made = {p.id: p.created_at_ms for p in objects.get_many(store, list(pins), ObjectType.PIN)}
    return set(sorted(made, key=lambda p: (made[p], p), reverse=True)[:count])


def feed_differences(store: AppData, pair: ClusterPair, users: Iterable[int], recent: int, *,
                     versions: bool = True, trimmed: dict[int, tuple[int, bool]] | None = None) -> list[str]:
    """``trimmed``: users whose feed a trim job capped, with the cap and
    whether they ever unfollowed anything. A trim removes pins for good, so
    such a feed may lack pins the truth has: all but the cap's newest when
    the user's truth only ever grew (what a trim removed had as many newer
    pins in the row, all of them still in the truth), any of them after an
    unfollow shrank it. Extra pins and wrong versions are never allowed."""
    out = []
    for user in users:
        want = expected_feed(store, user, recent)
        cap, unfollowed = (trimmed or {}).get(user, (0, False))
        may_lack = set() if not cap else set(want) if unfollowed else set(want) - newest(want, store, cap)
        for pool in pair:
            have = feed_cells(pool, user)
            missing, extra = sorted(set(want) - set(have) - may_lack), sorted(set(have) - set(want))
            if missing:
                out.append(f"feed of {user} on {pool.name}: missing pins {missing}")
            if extra:
                out.append(f"feed of {user} on {pool.name}: extra pins {extra}")
            if versions:
                for pin in sorted(set(want) & set(have)):
                    if have[pin] != max(want[pin]):
                        out.append(f"feed of {user} on {pool.name}: pin {pin} at version {have[pin]}, "
                                   f"expected {max(want[pin])} (follows at {sorted(want[pin])})")
    return out


# ------------------------------------------------------------------ typeahead


@dataclass(frozen=True, slots=True)
class Contact:
    name: str
    user_id: int | None
    version: int

    @property
    def tokens(self) -> set[str]:
        return set(tokenize(self.name))


def _names(store: AppData, ids: Iterable[int]) -> dict[int, tuple[str, int]]:
    out = {}
    for user in objects.get_many(store, list(dict.fromkeys(ids)), ObjectType.USER):
        name = str(user.data.get("name") or user.data.get("username") or "")
        out[user.id] = (name, int(user.data.get("name_at", user.created_at_ms)))
    return out


Index = dict[tuple[str, str], "Contact"]  # (source, contact key) -> contact


def expected_index(store: AppData, owners: Sequence[int], everyone: Sequence[int]) -> dict[int, Index]:
    """owner -> (source, contact key) -> contact. ``everyone``: every user
    who may follow an owner (the forward tables are the truth, and they
    live on the follower's shard)."""
    follows = {u: {e.to_id: e.sequence for e in mappings.walk(store, USER_FOLLOWS_USER, u)} for u in everyone}
    names = _names(store, everyone)
    imports = contacts.sources_of(store, owners)
    accounts = contacts.resolve_accounts(
        store, (a for imps in imports.values() for imp in imps for c in imp.contacts for a in c.accounts(imp.source)))
    out: dict[int, dict[tuple[str, str], Contact]] = {}
    for owner in owners:
        index: dict[tuple[str, str], Contact] = {}
        for contact, at in follows.get(owner, {}).items():
            name, name_at = names[contact]
            index[("following", f"u:{contact}")] = Contact(name, contact, max(at, name_at))
            back = follows.get(contact, {}).get(owner)
            if back is not None:
                index[("mutual", f"u:{contact}")] = Contact(name, contact, max(at, back, name_at))
        for follower in everyone:
            followed = follows.get(follower, {}).get(owner)
            if followed is not None:
                name, name_at = names[follower]
                index[("followers", f"u:{follower}")] = Contact(name, follower, max(followed, name_at))
        for imp in imports.get(owner, []):
            for record in imp.contacts:
                user_id = next((accounts[a] for a in record.accounts(imp.source) if a in accounts), None)
                index[(imp.source, record.key)] = Contact(record.name, user_id, imp.updated_at_ms)
        out[owner] = index
    return out


@dataclass
class Stored:
    """What one cluster holds for one (source, contact key) of an owner."""

    member: tuple[str, int | None, tuple[str, ...], int] | None = None  # name, user id, tokens, timestamp
    tokens: dict[str, tuple[str, int | None, int]] = field(default_factory=dict)  # token -> name, user id, ts


def _contact(value: bytes) -> tuple[str, int | None]:
    data = json.loads(value)
    return data["n"], data["u"]


def stored_index(pool: ClusterPool, owner: int) -> dict[tuple[str, str], Stored]:
    prefix = owner.to_bytes(8, "big")

    def work(connection: Any) -> tuple[list[Any], list[Any]]:
        wide = list(connection.table(WIDE_TABLE).scan(row_prefix=prefix, include_timestamp=True))
        tall = list(connection.table(TALL_TABLE).scan(row_prefix=prefix, include_timestamp=True))
        return wide, tall

    wide, tall = pool.run(f"oracle: index of {owner}", work)
    out: dict[tuple[str, str], Stored] = defaultdict(Stored)
    for row, cells in wide:
        source = SOURCE_CODES[row[8]]
        for column, (value, ts) in cells.items():
            family, _, qualifier = column.partition(b":")
            if family == b"m":
                data = json.loads(value)
                out[(source, qualifier.decode())].member = (data["n"], data["u"], tuple(data["t"]), ts)
            else:
                token, _, key = qualifier.partition(b"\x00")
                out[(source, key.decode())].tokens[token.decode()] = (*_contact(value), ts)
    for row, cells in tall:
        source = SOURCE_CODES[row[8]]
        token, _, key = row[9:].partition(b"\x00")
        place = out[(source, key.decode())]
        if not token:
            value, ts = cells[b"c:m"]
            data = json.loads(value)
            place.member = (data["n"], data["u"], tuple(data["t"]), ts)
        else:
            value, ts = cells[b"c:v"]
            line, line_ts = cells.get(b"c:t", (b"", -1))
            if line != ("|" + "|".join(sorted(set(tokenize(_contact(value)[0])))) + "|").encode() or line_ts != ts:
                place.tokens[f"{token.decode()} (bad token line {line!r})"] = (*_contact(value), ts)
            else:
                place.tokens[token.decode()] = (*_contact(value), ts)
    return dict(out)


def expected_second(store: AppData, owners: Sequence[int], limits: tuple[int, int, int]
                    ) -> dict[int, list[tuple[int, int, str]]]:
    """owner -> its second_degree list, [(user id, count, current name), ...]."""
    followees, per_followee, cap = limits
    newest_first: dict[int, list[int]] = {}

    def follows_of(user: int) -> list[int]:
        if user not in newest_first:
            newest_first[user] = [e.to_id for e in mappings.walk(store, USER_FOLLOWS_USER, user)]
        return newest_first[user]

    counted = {}
    for owner in owners:
        counts: dict[int, int] = defaultdict(int)
        for followee in follows_of(owner)[:followees]:
            for other in follows_of(followee)[:per_followee]:
                if other != owner and other not in follows_of(owner):
                    counts[other] += 1
        counted[owner] = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:cap]
    names = _names(store, {u for listed in counted.values() for u, _n in listed})
    return {owner: [(u, n, names[u][0]) for u, n in listed] for owner, listed in counted.items()}


def second_differences(store: AppData, pair: ClusterPair, owners: Sequence[int], limits: tuple[int, int, int]
                       ) -> list[str]:
    out = []
    want = expected_second(store, owners, limits)
    for owner in owners:
        for pool in pair:
            def work(connection: Any, owner: int = owner) -> Any:
                return connection.table(SECOND_TABLE).row(owner.to_bytes(8, "big"), columns=[b"s:l"]).get(b"s:l")

            cell = pool.run(f"oracle: second_degree of {owner}", work)
            have = [tuple(item) for item in json.loads(cell)] if cell else []
            if have != want[owner]:
                out.append(f"second_degree of {owner} on {pool.name}: {have}, should be {want[owner]}")
    return out


def index_differences(store: AppData, pair: ClusterPair, owners: Sequence[int], everyone: Sequence[int],
                      second: tuple[int, int, int]) -> list[str]:
    """``second``: the second_degree limits the jobs ran with (followees,
    per followee, cap)."""
    out = second_differences(store, pair, owners, second)
    expected = expected_index(store, owners, everyone)
    for owner in owners:
        want = expected[owner]
        for pool in pair:
            have = stored_index(pool, owner)
            where = f"index of {owner} on {pool.name}"
            for place in sorted(set(want) | set(have)):
                w, h = want.get(place), have.get(place)
                if w is None:
                    assert h is not None
                    out.append(f"{where}: {place} should be absent, holds {h}")
                    continue
                if h is None or h.member is None:
                    stray = f", stray tokens {h.tokens}" if h else ""
                    out.append(f"{where}: {place} missing (should be {w}){stray}")
                    continue
                name, user_id, tokens, ts = h.member
                if (name, user_id, ts) != (w.name, w.user_id, w.version) or set(tokens) != w.tokens:
                    out.append(f"{where}: {place} member is {h.member}, should be {w}")
                if set(h.tokens) != w.tokens:
                    out.append(f"{where}: {place} token cells {sorted(h.tokens)}, should be {sorted(w.tokens)}")
                wrong = {t: v for t, v in h.tokens.items() if v != (w.name, w.user_id, w.version)}
                if wrong:
                    out.append(f"{where}: {place} token cells {wrong} should hold {(w.name, w.user_id, w.version)}")
    return out
