"""What the index should hold, computed from the app data in MySQL (the
truth): the entries of whole users (backfill, verify), of one follow
relationship, of one user's followers or followees (a rename), of one
import.

An entry's version is the newest update time of the records it comes from
(``tasks.typeahead.entries``): a follow entry ``max(follow time, the
contact's name_at)``, a mutual entry both follow times and the name, an
imported entry the import's time. A change to any of those records raises
the version, so a write made from older truth is always the older cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tasks.appdata import contacts, graph, mappings, objects
from tasks.appdata.ids import ObjectType
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWED_BY_USER, USER_FOLLOWS_USER
from tasks.typeahead.entries import Entry, token_set
from tasks.typeahead.sources import FOLLOWERS, FOLLOWING, IMPORTED, MUTUAL, Source, source_named


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    at_ms: int


def user_key(user_id: int) -> str:
    return f"u:{user_id}"


def names_of(store: AppData, user_ids: Iterable[int]) -> dict[int, Name]:
    """Current names (and their versions) of the users that exist."""
    out: dict[int, Name] = {}
    for user in objects.get_many(store, list(dict.fromkeys(user_ids)), ObjectType.USER):
        name, at = graph.name_of(user)
        out[user.id] = Name(name, at)
    return out


def _graph_entry(owner: int, source: Source, contact: int, name: Name, *edge_times: int) -> Entry:
    return Entry(owner, source, user_key(contact), name.name, contact, max(name.at_ms, *edge_times))


def entries_of_owners(store: AppData, owners: Sequence[int]) -> dict[int, list[Entry]]:
    """Every entry of every source of ``owners``: the follow graph read in
    one query per shard and mapping, names in one per server."""
    followees = mappings.rows_from_many(store, USER_FOLLOWS_USER, owners)
    followers = mappings.rows_from_many(store, USER_FOLLOWED_BY_USER, owners)
    imports = contacts.sources_of(store, owners)
    contact_ids = {c for rows in (followees, followers) for m in rows.values() for c in m}
    names = names_of(store, contact_ids)
    accounts = contacts.resolve_accounts(
        store, (a for imps in imports.values() for imp in imps for c in imp.contacts for a in c.accounts(imp.source))
    )
    out: dict[int, list[Entry]] = {}
    for owner in owners:
        out[owner] = entries = []
        outgoing, incoming = followees.get(owner, {}), followers.get(owner, {})
        for contact, at in outgoing.items():
            if contact in names:
                entries.append(_graph_entry(owner, FOLLOWING, contact, names[contact], at))
                if contact in incoming:
                    entries.append(_graph_entry(owner, MUTUAL, contact, names[contact], at, incoming[contact]))
        for contact, at in incoming.items():
            if contact in names:
                entries.append(_graph_entry(owner, FOLLOWERS, contact, names[contact], at))
        for imp in imports.get(owner, []):
            entries.extend(import_entries(imp, accounts))
    return out


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


def import_of(store: AppData, owner: int, source: Source) -> tuple[list[Entry], int | None]:
    """The entries of ``owner``'s import from ``source`` and its time (None
    when there is no import)."""
    for imp in contacts.sources_of(store, [owner]).get(owner, []):
        if imp.source == source.name:
            accounts = contacts.resolve_accounts(store, (a for c in imp.contacts for a in c.accounts(imp.source)))
            return import_entries(imp, accounts), imp.updated_at_ms
    return [], None


@dataclass(frozen=True, slots=True)
class Slot:
    """One (owner, source, contact) place in the index and what belongs in
    it now: ``entry`` to be there, or None to be absent as of ``gone_at``."""

    owner: int
    source: Source
    key: str
    entry: Entry | None
    gone_at: int
    tokens: tuple[str, ...]  # the contact's current name tokens (deleted too when absent)


def follow_slots(store: AppData, follower: int, followee: int, at_ms: int) -> list[Slot]:
    """The four places a follow or unfollow of ``followee`` by ``follower``
    touches, from the truth now: the follower's following, the followee's
    followers, and both mutuals. An absent place is deleted as of the
    event's time or the contact's name time, whichever is newer (every
    earlier write of it is older than both)."""
    forward = mappings.sequences(store, USER_FOLLOWS_USER, follower, [followee]).get(followee)
    back = mappings.sequences(store, USER_FOLLOWS_USER, followee, [follower]).get(follower)
    names = names_of(store, [follower, followee])
    slots = []
    for owner, source, contact, times in (
        (follower, FOLLOWING, followee, (forward,)),
        (followee, FOLLOWERS, follower, (forward,)),
        (follower, MUTUAL, followee, (forward, back)),
        (followee, MUTUAL, follower, (forward, back)),
    ):
        name = names.get(contact)
        edge_times = [t for t in times if t is not None]
        entry = None
        if name is not None and len(edge_times) == len(times):
            entry = _graph_entry(owner, source, contact, name, *edge_times)
        gone_at = max(at_ms, name.at_ms if name else 0)
        slots.append(Slot(owner, source, user_key(contact), entry, gone_at, token_set(name.name) if name else ()))
    return slots


def rename_entries(store: AppData, user: int, edges: Sequence[mappings.Edge], phase: str) -> list[Entry]:
    """The entries holding ``user`` in the indexes of the users of ``edges``
    (a page of its followers, phase "followers", or of its followees,
    "following"; each edge's sequence is the follow time), with its current
    name."""
    names = names_of(store, [user])
    if user not in names:
        return []
    name = names[user]
    if phase == "followers":
        # The user is in each follower's "following", and in its "mutual" when it follows back.
        back = mappings.sequences(store, USER_FOLLOWS_USER, user, [e.to_id for e in edges])
        out = []
        for edge in edges:
            out.append(_graph_entry(edge.to_id, FOLLOWING, user, name, edge.sequence))
            if edge.to_id in back:
                out.append(_graph_entry(edge.to_id, MUTUAL, user, name, edge.sequence, back[edge.to_id]))
        return out
    # The user is in the "followers" of each of its followees.
    return [_graph_entry(edge.to_id, FOLLOWERS, user, name, edge.sequence) for edge in edges]
