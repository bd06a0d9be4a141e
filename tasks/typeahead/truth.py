"""What the index should hold, computed from the app data in MySQL (the
truth): the entries of whole users (backfill, verify), of one follow
relationship, of one user's followers or followees (a rename), of one
import.

An entry's version is the newest update time of the records it comes from
(``tasks.typeahead.entries``): a follow entry ``max(follow time, the
contact's name_at)``, a mutual entry both follow times and the name, an
imported entry the import's time. A change to any of those records raises
the version, so a write made from older truth is always the older cell.
One exception: an imported entry's user id follows the account links
(``contacts.link_account``), and a link changes it at the import's
version. Links never make an entry absent, so nothing deletes at that
version; the later write at an equal version is the one HBase keeps, and
each settle's check after writing makes the last write the newest truth.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tasks.appdata import contacts, graph, mappings, objects
from tasks.appdata.ids import ObjectType
from tasks.appdata.sql import Digest
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWED_BY_USER, USER_FOLLOWS_USER
from tasks.typeahead.entries import Entry
from tasks.typeahead.sources import FOLLOWERS, FOLLOWING, GRAPH_SOURCES, IMPORTED, MUTUAL, Source, source_named

# Accounts to user ids: ``contacts.resolve_accounts``, or a cache of it
# (``tasks.appdata.accountcache``) for a first look that is checked after.
Resolve = Callable[[AppData, Iterable[str]], dict[str, int]]


class Name(NamedTuple):
    # A tuple: a page's step 3 compares thousands of them with step 1's.
    name: str
    at_ms: int


def user_key(user_id: int) -> str:
    return f"u:{user_id}"


def names_of(store: AppData, user_ids: Iterable[int], digests: list[Digest] | None = None) -> dict[int, Name]:
    """Current names (and their versions) of the users that exist
    (``digests``: as ``objects.get_many`` fills them)."""
    out: dict[int, Name] = {}
    for user in objects.get_many(store, list(dict.fromkeys(user_ids)), ObjectType.USER, digests):
        name, at = graph.name_of(user)
        out[user.id] = Name(name, at)
    return out


def _graph_entry(owner: int, source: Source, contact: int, name: Name, *edge_times: int) -> Entry:
    return Entry(owner, source, user_key(contact), name.name, contact, max(name.at_ms, *edge_times))


Place = tuple[int, Source, str]  # owner, source, contact key


@dataclass(frozen=True, slots=True)
class OwnersRecords:
    """The app data a whole-owner truth is computed from, as read: equal
    records make the same truth, so a re-read that finds them unchanged
    need not build the entries again."""

    owners: tuple[int, ...]
    followees: dict[int, dict[int, int]]
    followers: dict[int, dict[int, int]]
    imports: dict[int, list[contacts.SourceImport]]
    names: dict[int, Name]
    accounts: dict[str, int]
    # What was asked for and the digests of what came back, for
    # ``unchanged``; not part of the records' value.
    asked: RecordsAsked | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class RecordsAsked:
    contact_ids: tuple[int, ...]
    accounts: tuple[str, ...]
    followees: dict[int, Digest]
    followers: dict[int, Digest]
    names: list[Digest]


@dataclass(frozen=True, slots=True)
class OwnersTruth:
    """Every entry the truth fills for some owners (every source), read at
    once, and the time of each of their imports: enough to say what any
    place of those owners should hold."""

    by_owner: dict[int, list[Entry]]
    entries: dict[Place, Entry]
    imported_at: dict[tuple[int, str], int]  # (owner, source name): the import's time
    records: OwnersRecords

    def places(self) -> list[Place]:
        return list(self.entries)

    def slots(self, places: Iterable[Place], at_ms: int | None = None) -> dict[Place, Slot]:
        """What each place should hold, as ``slots`` says for the same truth."""
        out: dict[Place, Slot] = {}
        for place in dict.fromkeys(places):
            owner, source, key = place
            if owner not in self.by_owner:
                raise ValueError(f"place of owner {owner} outside the owners read")
            gone_at = at_ms or 0
            if source in IMPORTED:
                gone_at = max(gone_at, self.imported_at.get((owner, source.name), 0))
            out[place] = Slot(owner, source, key, self.entries.get(place), gone_at)
        return out


def owners_truth(store: AppData, owners: Sequence[int], resolve: Resolve = contacts.resolve_accounts
                 ) -> OwnersTruth:
    """Every entry of every source of ``owners``."""
    return truth_of(read_owners(store, owners, resolve))


def read_owners(store: AppData, owners: Sequence[int], resolve: Resolve = contacts.resolve_accounts
                ) -> OwnersRecords:
    """What ``owners``' truth is computed from: the follow graph read in
    one query per shard and mapping, names in one per server."""
    followees_digests: dict[int, Digest] = {}
    followers_digests: dict[int, Digest] = {}
    followees = mappings.rows_from_many(store, USER_FOLLOWS_USER, owners, followees_digests)
    followers = mappings.rows_from_many(store, USER_FOLLOWED_BY_USER, owners, followers_digests)
    imports = contacts.sources_of(store, owners)
    contact_ids = tuple({c for rows in (followees, followers) for m in rows.values() for c in m})
    names_digests: list[Digest] = []
    names = names_of(store, contact_ids, names_digests)
    asked_accounts = tuple(dict.fromkeys(
        a for imps in imports.values() for imp in imps for c in imp.contacts for a in c.accounts(imp.source)))
    accounts = resolve(store, asked_accounts)
    asked = RecordsAsked(contact_ids, asked_accounts, followees_digests, followers_digests, names_digests)
    return OwnersRecords(tuple(owners), followees, followers, imports, names, accounts, asked)


def unchanged(store: AppData, records: OwnersRecords) -> bool:
    """Whether MySQL still holds what ``read_owners`` read as ``records``:
    what ``read_owners`` would read again, at a fraction of its cost. The
    graph and the names are compared by digest (equal digests: the same
    text, so the same rows, and then the same contacts and accounts to ask
    about); imports and accounts, small, are read again whole. Stops at
    the first difference."""
    asked = records.asked
    return (
        asked is not None
        and mappings.digests_from_many(store, USER_FOLLOWS_USER, records.owners) == asked.followees
        and mappings.digests_from_many(store, USER_FOLLOWED_BY_USER, records.owners) == asked.followers
        and contacts.sources_of(store, records.owners) == records.imports
        and objects.digests_of_many(store, asked.contact_ids, ObjectType.USER) == asked.names
        and contacts.resolve_accounts(store, asked.accounts) == records.accounts
    )


def truth_of(records: OwnersRecords) -> OwnersTruth:
    """The entries ``records`` make."""
    names, accounts = records.names, records.accounts
    by_owner: dict[int, list[Entry]] = {}
    imported_at: dict[tuple[int, str], int] = {}
    for owner in records.owners:
        by_owner[owner] = entries = []
        outgoing, incoming = records.followees.get(owner, {}), records.followers.get(owner, {})
        for contact, at in outgoing.items():
            if contact in names:
                entries.append(_graph_entry(owner, FOLLOWING, contact, names[contact], at))
                if contact in incoming:
                    entries.append(_graph_entry(owner, MUTUAL, contact, names[contact], at, incoming[contact]))
        for contact, at in incoming.items():
            if contact in names:
                entries.append(_graph_entry(owner, FOLLOWERS, contact, names[contact], at))
        for imp in records.imports.get(owner, []):
            imported_at[(owner, imp.source)] = imp.updated_at_ms
            entries.extend(import_entries(imp, accounts))
    listed = {(e.owner, e.source, e.key): e for entries in by_owner.values() for e in entries}
    return OwnersTruth(by_owner, listed, imported_at, records)


def entries_of_owners(store: AppData, owners: Sequence[int]) -> dict[int, list[Entry]]:
    """Every entry of every source of ``owners``, by owner."""
    return owners_truth(store, owners).by_owner


def import_entries(imp: contacts.SourceImport, accounts: dict[str, int]) -> list[Entry]:
    """The entries of one import; unknown source names are skipped (an
    import stored for a source this version does not index)."""
    try:
        source = source_named(imp.source)
    except ValueError:
        return []
    if source not in IMPORTED:
        return []
    out = []
    for record in imp.contacts:
        user_id = next((accounts[a] for a in record.accounts(imp.source) if a in accounts), None)
        out.append(Entry(imp.user_id, source, record.key, record.name, user_id, imp.updated_at_ms))
    return out


class Slot(NamedTuple):
    """One (owner, source, contact) place in the index and what belongs in
    it now: ``entry`` to be there, or None to be absent as of ``gone_at``.
    A tuple: a backfill page makes thousands."""

    owner: int
    source: Source
    key: str
    entry: Entry | None
    gone_at: int  # absent: the time it became so (the event's, the import's); 0 when not known

    @property
    def place(self) -> Place:
        return self.owner, self.source, self.key


def _contact_id(key: str) -> int | None:
    kind, _, rest = key.partition(":")
    return int(rest) if kind == "u" and rest.isascii() and rest.isdigit() else None


def _follow_times(store: AppData, pairs: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The follow time of each (follower, followee) pair that is followed,
    read as point lookups of the pairs, batched per shard."""
    return mappings.sequences_of_pairs(store, USER_FOLLOWS_USER, pairs)


def _edges(owner: int, source: Source, contact: int) -> list[tuple[int, int]]:
    """The follows, (follower, followee), a graph place needs."""
    if source is FOLLOWING:
        return [(owner, contact)]
    if source is FOLLOWERS:
        return [(contact, owner)]
    return [(owner, contact), (contact, owner)]  # mutual


def slots(store: AppData, places: Iterable[Place], at_ms: int | None = None,
          resolve: Resolve = contacts.resolve_accounts) -> dict[Place, Slot]:
    """What each place should hold now, from MySQL. An absent place is
    absent as of ``at_ms`` (the time of the event that emptied it, when the
    caller knows one), or as of its import's time for an imported source."""
    wanted = list(dict.fromkeys(places))
    graph_places = [(o, s, k, c) for o, s, k in wanted if s in GRAPH_SOURCES and (c := _contact_id(k)) is not None]
    times = _follow_times(store, {edge for o, s, _k, c in graph_places for edge in _edges(o, s, c)})
    names = names_of(store, [c for _o, _s, _k, c in graph_places])
    out: dict[Place, Slot] = {}
    for owner, source, key, contact in graph_places:
        edge_times = [times.get(edge) for edge in _edges(owner, source, contact)]
        name = names.get(contact)
        entry = None
        if name is not None and all(t is not None for t in edge_times):
            entry = _graph_entry(owner, source, contact, name, *[t for t in edge_times if t is not None])
        out[(owner, source, key)] = Slot(owner, source, key, entry, at_ms or 0)
    imported = [p for p in wanted if p[1] in IMPORTED]
    owners = {owner for owner, _s, _k in imported}
    imports = {(imp.user_id, imp.source): imp for imps in contacts.sources_of(store, owners).values() for imp in imps}
    accounts = resolve(store, (a for imp in imports.values() for c in imp.contacts for a in c.accounts(imp.source)))
    entries = {(e.owner, e.source, e.key): e for imp in imports.values() for e in import_entries(imp, accounts)}
    for place in imported:
        owner, source, key = place
        imp = imports.get((owner, source.name))
        gone_at = max(at_ms or 0, imp.updated_at_ms if imp else 0)
        out[place] = Slot(owner, source, key, entries.get(place), gone_at)
    for owner, source, key in wanted:  # keys that name no contact this code knows: absent
        if (owner, source, key) not in out:
            out[(owner, source, key)] = Slot(owner, source, key, None, at_ms or 0)
    return out


def follow_places(follower: int, followee: int) -> list[Place]:
    """The four places a follow or unfollow of ``followee`` by ``follower``
    touches: the follower's following, the followee's followers, and both
    mutuals."""
    return [(follower, FOLLOWING, user_key(followee)), (followee, FOLLOWERS, user_key(follower)),
            (follower, MUTUAL, user_key(followee)), (followee, MUTUAL, user_key(follower))]


def import_places(store: AppData, owner: int, source: Source) -> list[Place]:
    """The places of ``owner``'s import from ``source`` as MySQL has it."""
    for imp in contacts.sources_of(store, [owner]).get(owner, []):
        if imp.source == source.name and source in IMPORTED:
            return [(owner, source, record.key) for record in imp.contacts]
    return []


def account_places(store: AppData, account: str, importers: Sequence[contacts.Importer]) -> list[Place]:
    """The places of the contacts naming ``account`` in the imports of
    ``importers`` as MySQL has them (an import that no longer names it has none)."""
    wanted = set(importers)
    out: list[Place] = []
    for imps in contacts.sources_of(store, {owner for owner, _s in importers}).values():
        for imp in imps:
            if (imp.user_id, imp.source) not in wanted:
                continue
            try:
                source = source_named(imp.source)
            except ValueError:
                continue
            if source in IMPORTED:
                out += [(imp.user_id, source, c.key) for c in imp.contacts if account in c.accounts(imp.source)]
    return out


def rename_places(user: int, others: Sequence[int], phase: str) -> list[Place]:
    """The places holding ``user`` in the indexes of ``others`` (a page of
    its followers, phase "followers", or of its followees, "following")."""
    key = user_key(user)
    if phase == "followers":
        # The user is in each follower's "following", and in its "mutual" when it follows back.
        return [p for other in others for p in ((other, FOLLOWING, key), (other, MUTUAL, key))]
    # The user is in the "followers" of each of its followees.
    return [(other, FOLLOWERS, key) for other in others]


def owner_places(store: AppData, owners: Sequence[int]) -> list[Place]:
    """Every place the truth fills for ``owners``."""
    return owners_truth(store, owners).places()
