"""The ``second_degree`` source: the users an owner's followees follow,
ranked by how many of those followees follow them, without the owner and
whom the owner follows already, at most ``cap`` of them.

**The truth, bounded.** Only the owner's ``followees`` newest followees
count, and of each only its ``per_followee`` newest follows: a recompute
reads at most followees x per_followee rows however famous anyone is (an
account that 8,000 of your followees follow counts at most ``followees``).

**Where it lives**: ``typeahead_second``, a row per owner, ``s:l`` =
``[[user id, count, name], ...]`` most shared first, one cell written
whole by ``settle``. A lookup reads that one cell. A rename of a listed
user changes it, so the rename's pages start a recompute of the owners
two hops away (``rename_actors``).

**Why a list written whole ends right in any job order.** ``settle``
reads the truth, then the cell, and writes when they differ at a
timestamp past the one it read; then reads the truth again and goes round
while it changed. A write from older truth that lands after a newer one
was written after that newer writer read the truth, so its own re-read
sees the newer truth and it writes again, above it. A write that lands
first is overwritten by the newer one, whose timestamp is past the one
that newer writer read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.appdata import mappings
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import USER_FOLLOWED_BY_USER, USER_FOLLOWS_USER
from tasks.hbase import ClusterPool, put_versions
from tasks.hbase.reads import get_rows, get_versions
from tasks.typeahead.entries import CorruptCell, owner_key
from tasks.typeahead.rank import Candidate, Contact
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import SECOND_DEGREE
from tasks.typeahead.tables import TYPEAHEAD_SECOND
from tasks.typeahead.truth import names_of, user_key
from tasks.typeahead.writer import MAX_ROUNDS, IndexBusy

SECOND_TABLE = TYPEAHEAD_SECOND.name
LIST_COLUMN = b"s:l"

Listed = tuple[tuple[int, int, str], ...]  # (user id, followees following them, name), most first, then by id


@dataclass(frozen=True, slots=True)
class Limits:
    followees: int = 200
    per_followee: int = 100
    cap: int = 50

    @classmethod
    def of(cls, settings: TypeaheadSettings) -> Limits:
        return cls(settings.second_followees, settings.second_per_followee, settings.second_cap)


DEFAULT_LIMITS = Limits()  # the settings' defaults


# ------------------------------------------------------------------ the truth


def truth(store: AppData, owners: Sequence[int], limits: Limits) -> dict[int, Listed]:
    """Each owner's list as MySQL has it now (owners without one: ``()``)."""
    owners = list(dict.fromkeys(owners))
    newest = mappings.newest_of_many(store, USER_FOLLOWS_USER, owners, limits.followees + 1)
    counted = {o: [e.to_id for e in edges[: limits.followees]] for o, edges in newest.items()}
    follows = mappings.newest_of_many(store, USER_FOLLOWS_USER, {f for fs in counted.values() for f in fs},
                                      limits.per_followee) if counted else {}
    ranked: dict[int, list[tuple[int, int]]] = {}
    for owner in owners:
        skip = {owner, *counted.get(owner, ())}
        counts = Counter(e.to_id for f in counted.get(owner, ()) for e in follows.get(f, ()) if e.to_id not in skip)
        ranked[owner] = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    # An owner following more than were counted may follow some of its best
    # candidates already: those are asked about, a few at a time.
    more = [o for o in owners if len(newest.get(o, ())) > limits.followees]
    kept = {o: tuple(ranked[o][: limits.cap]) for o in owners if o not in more} | _unfollowed(
        store, {o: ranked[o] for o in more}, limits.cap)
    names = names_of(store, {i for listed in kept.values() for i, _n in listed})
    return {o: tuple((i, n, names[i].name) for i, n in listed if i in names) for o, listed in kept.items()}


def rename_actors(store: AppData, renamed: int, followers: Sequence[int], limits: Limits) -> list[int]:
    """Those of ``followers`` (of the renamed user) that have followers and
    whose follows count it: the owners listing it follow them, so each's
    followers are recomputed (a follower nobody follows starts nothing)."""
    followed = mappings.having_rows(store, USER_FOLLOWED_BY_USER, followers)
    newest = mappings.newest_of_many(store, USER_FOLLOWS_USER, [f for f in followers if f in followed],
                                     limits.per_followee)
    return [f for f in followers if any(e.to_id == renamed for e in newest.get(f, ()))]


Counted = tuple[tuple[int, int], ...]


def _unfollowed(store: AppData, ranked: dict[int, list[tuple[int, int]]], cap: int) -> dict[int, Counted]:
    """The first ``cap`` of each owner's ranked candidates it does not follow."""
    kept: dict[int, list[tuple[int, int]]] = {o: [] for o in ranked}
    at = dict.fromkeys(ranked, 0)
    while True:
        asking = {o: ranked[o][at[o] : at[o] + 2 * cap] for o in ranked
                  if len(kept[o]) < cap and at[o] < len(ranked[o])}
        if not asking:
            return {o: tuple(kept[o]) for o in ranked}
        followed = mappings.sequences_of_pairs(store, USER_FOLLOWS_USER,
                                               [(o, c) for o, part in asking.items() for c, _n in part])
        for owner, part in asking.items():
            at[owner] += len(part)
            room = cap - len(kept[owner])
            kept[owner] += [item for item in part if (owner, item[0]) not in followed][:room]


# ------------------------------------------------------------------ cells


def list_value(listed: Listed) -> bytes:
    return json.dumps([list(item) for item in listed], separators=(",", ":"), ensure_ascii=False).encode()


def decode_list(value: bytes) -> Listed:
    try:
        data: Any = json.loads(value)
        listed = tuple((i, n, name) for i, n, name in data
                       if type(i) is int and type(n) is int and isinstance(name, str))
        if len(listed) != len(data):
            raise ValueError("not [id, count, name] items")
    except (ValueError, TypeError) as exc:
        raise CorruptCell(f"not a second_degree list: {value[:60]!r}") from exc
    return listed


def stored_lists(pool: ClusterPool, owners: Sequence[int]) -> dict[int, tuple[int, Listed | None]]:
    """Each owner's list cell on the cluster: its timestamp and the list
    (None when unreadable); owners without one are left out."""
    rows = get_versions(pool, SECOND_TABLE, [owner_key(o) for o in owners], columns=[LIST_COLUMN], max_versions=1)
    out: dict[int, tuple[int, Listed | None]] = {}
    for row, columns in rows.items():
        if versions := columns.get(LIST_COLUMN):
            ts, value = versions[0]
            try:
                out[int.from_bytes(row, "big")] = ts, decode_list(value)
            except CorruptCell:
                out[int.from_bytes(row, "big")] = ts, None
    return out


# ------------------------------------------------------------------ writes


def settle(store: AppData, pool: ClusterPool, owners: Iterable[int], limits: Limits) -> int:
    """Makes each owner's list on this cluster what MySQL says (the
    module's docstring says why any order ends right). The cells written;
    ``IndexBusy`` when the truth kept changing."""
    todo = list(dict.fromkeys(owners))
    changed = 0
    for _ in range(MAX_ROUNDS):
        if not todo:
            return changed
        want = truth(store, todo, limits)
        held = stored_lists(pool, todo)
        puts = []
        for owner in todo:
            ts, listed = held.get(owner, (0, ()))
            if listed != want[owner]:
                puts.append((owner_key(owner), LIST_COLUMN, list_value(want[owner]), max(ts + 1, now_ms())))
        changed += put_versions(pool, SECOND_TABLE, puts)
        again = truth(store, todo, limits)
        todo = [o for o in todo if again[o] != want[o]]
    if todo:
        raise IndexBusy(f"the second_degree truth of {len(todo)} owners kept changing while it was written")
    return changed


def differences(store: AppData, pool: ClusterPool, owners: Sequence[int], limits: Limits) -> dict[int, str]:
    """The owners whose list differs from MySQL, each with how (a verify
    pass; ``settle`` repairs them). The cluster is read first: a list that
    the truth read after it disagrees with is stale, not new."""
    held = stored_lists(pool, owners)
    want = truth(store, owners, limits)
    out: dict[int, str] = {}
    for owner in dict.fromkeys(owners):
        listed = held.get(owner, (0, ()))[1]
        if listed != want[owner]:
            wrong = "unreadable" if listed is None else f"of {len(listed)} ids"
            out[owner] = f"second_degree list {wrong}, the truth has {len(want[owner])}"
    return out


# ------------------------------------------------------------------ lookups


def candidates(pool: ClusterPool, owner: int) -> list[Candidate]:
    """``owner``'s second_degree contacts, each weighted by its count."""
    row = owner_key(owner)
    cell = get_rows(pool, SECOND_TABLE, [row], columns=[LIST_COLUMN]).get(row, {}).get(LIST_COLUMN)
    return [Candidate(SECOND_DEGREE.name, Contact(user_key(user), name, user), count)
            for user, count, name in (decode_list(cell) if cell else ())]
