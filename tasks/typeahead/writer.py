"""Writes of index entries to one cluster: every job, backfill page and
verify repair ends a set of places (owner, source, contact) as the truth
says, with ``settle``.

Every cell of an entry carries the entry's version (``tasks.typeahead.truth``),
and each place's member record (the contact and the tokens it is indexed
under) is kept in every version written and not yet deleted (the family
keeps all versions). ``settle`` makes a place right in three steps:

1. **read**: what MySQL says each place should hold (an entry, or absent
   as of a time), then every version of its member record on the cluster;
2. **write**: an entry's cells at its version (its member record first),
   and the cells of every older version the member records list deleted:
   each member record at exactly its version (so one never read is never
   hidden, and stays findable), their tokens up to the version before the
   entry's; an absent place's cells of every version listed up to the
   time it became absent (the event's, when the caller knows it) or older
   than the truth read, the same way. Deletes never reach a version newer
   than the truth read: that one was written from newer truth, and is its
   writer's to keep;
3. **read MySQL again**: a place whose truth changed meanwhile goes round
   again from step 1.

Why that leaves every place right once the jobs are done, whatever order
they ran in, twice, crashed half-way or racing each other: a write from
older truth (a stale name's tokens, an entry of a follow since undone) is
either seen by a later settle of the place, which reads the member records
after the truth changed and so finds it and deletes it, or it lands after
that read, and then its own step 3 runs after the change and sees it, and
that settle deletes it itself; a settle whose worker dies before its step
3 is run again over the same places (a job's places come from its body, or
from what the cluster holds), and finds it then. Versions only grow with
the truth (a changed name or a new follow has a later time), so a delete
up to an older version never hides a newer entry. And a write that lands
after HBase purged the delete marker that should hide it (a major
compaction) is caught the same way.

Puts and deletes never share a call (see tasks/hbase/writes.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tasks.appdata.store import AppData, now_ms
from tasks.errors import TryLater
from tasks.hbase import ClusterPool, delete_versions, put_tables
from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.reads import get_versions, scan_versions
from tasks.typeahead import truth
from tasks.typeahead.entries import (
    MEMBER_FAMILY,
    TALL_MEMBER,
    TALL_TABLE,
    WIDE_TABLE,
    Cells,
    Entry,
    member_cell,
    member_column,
    member_row,
    member_tokens,
    merge,
    owner_ranges,
    row_prefix,
    split_tall_row,
    split_wide_row,
    token_columns,
)
from tasks.typeahead.sources import WIDE, Schema
from tasks.typeahead.truth import Place, Slot

MAX_ROUNDS = 5
# A version this much older than the truth read is from truth older than
# it; a younger one may be of an action whose time was taken just before
# that read and whose write committed just after (so the read missed it).
CLOCK_MARGIN_MS = 5_000


class IndexBusy(TryLater):
    """The truth of some places kept changing while they were written: the
    job runs again later."""


class Version(NamedTuple):
    """One version of a place's member record on the cluster. A tuple: a
    backfill page over a filled index reads one for each of its thousands
    of places."""

    at: int
    record: bytes

    @property
    def tokens(self) -> tuple[str, ...]:
        """The tokens the record lists. Read only for a version that goes: a
        page rebuilt over an index that is already right parses none."""
        return member_tokens(self.record)


def read_members(pool: ClusterPool, places: Iterable[Place]) -> dict[Place, list[Version]]:
    """Every version of each place's member record, newest first (places
    without one are left out)."""
    wide: dict[bytes, list[Place]] = defaultdict(list)
    tall: dict[bytes, Place] = {}
    for place in dict.fromkeys(places):
        owner, source, key = place
        if source.schema is Schema.WIDE:
            wide[row_prefix(owner, source)].append(place)
        else:
            tall[member_row(owner, source, key)] = place
    found: dict[Place, list[Version]] = {}
    if wide:
        # Each row lists only its own places' columns: a union for every row
        # would make a request of rows x columns.
        columns = {row: sorted({member_column(p[2]) for p in ps}) for row, ps in wide.items()}
        rows = get_versions(pool, WIDE_TABLE, sorted(wide), columns=columns, max_versions=ALL_VERSIONS)
        for row, ps in wide.items():
            for place in ps:
                versions = rows.get(row, {}).get(member_column(place[2]), [])
                if versions:
                    found[place] = list(map(Version._make, versions))
    if tall:
        rows = get_versions(pool, TALL_TABLE, sorted(tall), columns=[TALL_MEMBER], max_versions=ALL_VERSIONS)
        for row, place in tall.items():
            versions = rows.get(row, {}).get(TALL_MEMBER, [])
            if versions:
                found[place] = list(map(Version._make, versions))
    return found


@dataclass
class Plan:
    """Step 2's writes: entries to put; token cells to delete, by the
    version they are deleted up to; member records to delete, each at
    exactly one version."""

    puts: list[Entry] = field(default_factory=list)
    tokens: dict[int, Cells] = field(default_factory=lambda: defaultdict(dict))
    members: list[tuple[Place, int]] = field(default_factory=list)

    def retire(self, place: Place, versions: Sequence[Version], keep: Iterable[str] = (), up_to: int = 0) -> None:
        """The cells of ``versions`` of ``place`` go: each member record at
        exactly its version, and every token those records list, up to
        ``up_to`` (or the newest of them). A member record is never
        deleted at a version nobody read, so one written later stays
        findable: a token cell is only ever visible while a member record
        that lists it is."""
        if not versions:
            return
        owner, source, key = place
        tokens = tuple(sorted({t for v in versions for t in v.tokens} | set(keep)))
        merge(self.tokens[up_to or max(v.at for v in versions)], token_columns(owner, source, key, tokens))
        self.members += [(place, v.at) for v in versions]


def plan(slots: Sequence[Slot], members: dict[Place, list[Version]], read_at: int,
         mine: dict[Place, int] | None = None) -> Plan:
    """Step 2's writes. ``read_at``: when the truth was read; ``mine``: the
    version this settle put at each place in an earlier round (from truth
    that has changed since, so it is stale whatever its age)."""
    mine = mine or {}
    out = Plan()
    for slot in slots:
        versions = members.get(slot.place, [])
        if slot.entry is not None:
            out.puts.append(slot.entry)
            # Up to the version before the entry's own: its new cells stay,
            # the older versions of its own token columns go with the rest.
            older = [v for v in versions if v.at < slot.entry.version]
            out.retire(slot.place, older, slot.entry.tokens, slot.entry.version - 1)
            continue
        # Not a version newer than this read, which may be of a follow since,
        # unless the event's time or this settle's own earlier write says
        # it is stale.
        out.retire(slot.place, [v for v in versions
                                if v.at <= slot.gone_at or v.at < read_at - CLOCK_MARGIN_MS
                                or v.at == mine.get(slot.place)])
    return out


def _apply(pool: ClusterPool, plan: Plan) -> int:
    # Member records go first, in a call of their own: a write cut short
    # (a tall source's rows are not one atomic batch) never leaves token
    # cells that no member record lists, which nothing could find again.
    members: dict[str, list[tuple[bytes, bytes, bytes, int]]] = defaultdict(list)
    tokens: dict[str, list[tuple[bytes, bytes, bytes, int]]] = defaultdict(list)
    for entry in plan.puts:
        table, row, column, value = entry.member_cell()
        members[table].append((row, column, value, entry.version))
        for table, row, column, value in entry.token_cells():
            tokens[table].append((row, column, value, entry.version))
    gone: dict[str, list[tuple[bytes, bytes, int, str]]] = defaultdict(list)
    for up_to, tables in plan.tokens.items():
        for table, rows in tables.items():
            gone[table] += [(row, column, up_to, "upto") for row, cols in rows.items() for column in cols]
    for (owner, source, key), version in plan.members:
        table, row, column, _value = member_cell(owner, source, key, b"")
        gone[table].append((row, column, version, "version"))
    return (put_tables(pool, dict(sorted(members.items())))
            + put_tables(pool, dict(sorted(tokens.items())))
            + sum(delete_versions(pool, table, planned) for table, planned in sorted(gone.items())))


def held_members(pool: ClusterPool, owners: Sequence[int]) -> dict[Place, list[Version]]:
    """What ``read_members`` gives for every place of ``owners`` the cluster
    holds a member record for, without naming the places: one read of
    every version of their wide rows' member family, one scan of their
    tall member rows."""
    if not owners:
        return {}
    found: dict[Place, list[Version]] = {}
    wide = [row_prefix(owner, source) for owner in owners for source in WIDE]
    family = MEMBER_FAMILY.rstrip(b":")
    for row, columns in get_versions(pool, WIDE_TABLE, wide, columns=[family], max_versions=ALL_VERSIONS).items():
        owner, source = split_wide_row(row)
        for column, versions in columns.items():
            found[(owner, source, column[len(MEMBER_FAMILY):].decode())] = list(map(Version._make, versions))
    wanted = set(owners)
    for start, stop in owner_ranges(owners):
        rows = scan_versions(pool, TALL_TABLE, start=start, stop=stop, columns=[TALL_MEMBER])
        for row, cells in rows.items():
            owner, source, _token, key = split_tall_row(row)
            if owner in wanted and (held := cells.get(TALL_MEMBER)):
                found[(owner, source, key)] = list(map(Version._make, held))
    return found


def put_entries(pool: ClusterPool, entries: Iterable[Entry]) -> int:
    """Every cell of ``entries`` at its entry's version, reading nothing
    first: loading an index known to be empty (benchmarks, tests). Jobs
    settle instead."""
    return _apply(pool, Plan(puts=list(entries)))


TruthReader = Callable[[Sequence[Place]], dict[Place, Slot]]
# Step 1 already done: when the truth was read, what it says, the member records.
First = tuple[int, dict[Place, Slot], dict[Place, list[Version]]]


def settle(store: AppData, pool: ClusterPool, places: Iterable[Place], *, at_ms: int | None = None,
           read_truth: TruthReader | None = None, first: First | None = None) -> int:
    """Makes ``places`` hold what MySQL says on this cluster (see the
    module's docstring); ``at_ms``: the time of the event that changed them,
    when known (an unfollow's), to delete up to. ``read_truth`` reads what
    places should hold (``truth.slots`` unless given); ``first``: step 1's
    truth already read, the time taken just before that read, and every
    version of its places' member records read after it (``held_members``).
    The cells written and deleted. Raises ``IndexBusy`` when the truth kept
    changing."""
    todo = list(dict.fromkeys(places))
    read = read_truth or (lambda wanted: truth.slots(store, wanted, at_ms))
    changed = 0
    mine: dict[Place, int] = {}
    for _ in range(MAX_ROUNDS):
        if not todo:
            return changed
        if first is not None:
            (read_at, want, members), first = first, None
        else:
            read_at = now_ms()
            want = read(todo)
            members = read_members(pool, todo)
        changed += _apply(pool, plan([want[p] for p in todo], members, read_at, mine))
        mine.update((p, slot.entry.version) for p in todo if (slot := want[p]).entry is not None)
        again = read(todo)
        # The same entry object, as a truth read again unchanged gives: no compare.
        todo = [p for p in todo if (now := again[p].entry) is not (was := want[p].entry) and now != was]
    if todo:
        raise IndexBusy(f"the truth of {len(todo)} index places kept changing while they were written")
    return changed
