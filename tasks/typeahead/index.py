"""Lookups: ``ContactsIndex.lookup(user, query, limit, sources=None)``.

One scan of the user's wide rows (every wide source at once, the query's
longest token as a ColumnPrefixFilter), then one prefix scan per tall
source (at most ``tall_scan_limit`` rows each) unless the wide sources
already give ``limit`` matches that rank above every tall source; then,
likewise, the owner's second_degree list and its names
(``tasks.typeahead.second``); ranking and de-duplication in Python
(``tasks.typeahead.rank``, each candidate scored once). A match's ``sources`` lists the tall and
second_degree sources only when they were read. A lookup
limited to some sources reads only theirs: the wide scan's range spans the
codes asked for, a tall source not asked for is not scanned. Reads the
primary; the standby when the primary fails or has not answered within
``standby_after_ms`` (its calls end by then: ``tasks.hbase.thrift2.within``),
so a hung region server or a host cut off costs a lookup that, not the
call timeout; all on the caller's thread.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Sequence

from tasks.appdata.ids import ObjectType, expect_type
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool, HBaseError
from tasks.hbase.reads import prefix_filter, quote_literal, scan_rows
from tasks.hbase.thrift2 import within
from tasks.typeahead.entries import (
    SEPARATOR,
    TALL_TABLE,
    TALL_TOKENS,
    TALL_VALUE,
    TOKEN_FAMILY,
    WIDE_TABLE,
    CorruptCell,
    decode_contact,
    owner_key,
    row_prefix,
    split_wide_row,
    tall_row_key,
)
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.rank import Candidate, Contact, LookupResult, Match, Ranking
from tasks.typeahead.second import candidates as second_candidates
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import SECOND_DEGREE, SOURCES, TALL, WIDE, Source
from tasks.typeahead.tokens import tokenize

# A user has one wide row per wide source; more than this many in one
# owner's range would be rows of sources this code does not know.
WIDE_ROWS_MAX = 64


def _next_key(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else b""


@functools.lru_cache(maxsize=32_768)
def contact_of(key: bytes, value: bytes) -> Contact:
    """The contact of an index cell: its contact key (from the column or the
    row) and its value. Cached: a contact is the same key and bytes in the
    index of every owner who has it, so lookups meet the same ones again and
    again (every follower of a celebrity, in each of that account's
    lookups). Contacts are immutable: lookups on any thread share them. A
    cell that is not a contact raises each time it is read."""
    name, user_id = decode_contact(value)
    return Contact(key.decode(), name, user_id)


def wide_candidates(
    pool: ClusterPool, owner: int, probe: str, sources: Collection[Source] = WIDE
) -> list[Candidate]:
    """Every contact in ``owner``'s wide ``sources`` with a name token starting with ``probe``."""
    wanted = [s for s in sources if s in WIDE]
    if not wanted:
        return []
    found: list[Candidate] = []
    if len(wanted) == len(WIDE):
        start, stop = owner_key(owner), owner_key(owner + 1)
    else:  # the rows from the first code asked for to the last: no other owner's, few of other sources
        start = owner_key(owner) + bytes([min(s.code for s in wanted)])
        stop = owner_key(owner) + bytes([max(s.code for s in wanted) + 1])
    for row, columns in scan_rows(
        pool, WIDE_TABLE, start=start, stop=stop, limit=WIDE_ROWS_MAX,
        columns=[TOKEN_FAMILY.rstrip(b":")], scan_filter=prefix_filter(probe.encode()),
    ):
        _owner, source = split_wide_row(row)
        if source not in wanted:
            continue
        for column, value in columns.items():
            found.append(Candidate(source.name, contact_of(column[len(TOKEN_FAMILY):].partition(SEPARATOR)[2], value)))
    return found


def tokens_filter(tokens: Sequence[str]) -> bytes | None:
    """A server-side filter keeping tall rows whose name has a token starting
    with each of ``tokens`` (the query's tokens besides the scanned one), so
    a scan of a huge source returns rows that can match, not just rows that
    share one token. The "Exclude" filter leaves the tokens cell it reads out
    of the rows it returns: the lookup needs only the contact."""
    parts = [
        b"SingleColumnValueExcludeFilter('c', 't', =, " + quote_literal(b"substring:|" + t.encode()) + b", true, true)"
        for t in dict.fromkeys(tokens)
    ]
    return b" AND ".join(parts) or None


def tall_candidates(
    pool: ClusterPool, owner: int, probe: str, limit: int, others: Sequence[str] = (),
    sources: Collection[Source] = TALL,
) -> list[Candidate]:
    """Up to ``limit`` contacts per tall source of ``owner`` (of those in
    ``sources``) with a name token starting with ``probe`` (and, checked by
    HBase, tokens starting with each of ``others``)."""
    found: list[Candidate] = []
    scan_filter = tokens_filter(others)
    # The filter reads the tokens cell; without one, only the contact is read
    # (fewer cells for the server to read and send, and for us to decode).
    columns = [TALL_VALUE, TALL_TOKENS] if scan_filter else [TALL_VALUE]
    for source in TALL:
        if source not in sources:
            continue
        start = row_prefix(owner, source) + probe.encode()
        for row, cells in scan_rows(
            pool, TALL_TABLE, start=start, stop=_next_key(start), columns=columns, scan_filter=scan_filter,
            limit=limit,
        ):
            found.append(Candidate(source.name, contact_of(tall_row_key(row), cells[TALL_VALUE])))
    return found


def _cannot_enter(matches: list[Match], order: Sequence[str], limit: int, later: Collection[Source]) -> bool:
    """True when ``limit`` matches already rank above every source of
    ``later`` (sources not read yet), so nothing they hold could enter the
    answer (the common case for a short prefix: followers and second_degree
    rank last by default), or when ``later`` is empty."""
    if not later:
        return True
    if len(matches) < limit:
        return False
    position = {name: i for i, name in enumerate(order)}
    last = position.get(matches[-1].source, len(order))
    return all(position.get(s.name, len(order)) > last for s in later)


class ContactsIndex:
    def __init__(self, pair: ClusterPair, settings: TypeaheadSettings | None = None) -> None:
        self.pair = pair
        self.settings = settings or TypeaheadSettings.from_env()

    @classmethod
    def from_env(cls) -> ContactsIndex:
        return cls(ClusterPair.from_settings(), TypeaheadSettings.from_env())

    def lookup(
        self, user_id: int, query: str, limit: int = 10, *, order: Sequence[str] | None = None,
        sources: Collection[Source] | None = None,
    ) -> LookupResult:
        """The best ``limit`` contacts of ``user_id`` whose name tokens start
        with the query's tokens, found in ``sources`` (None: every source).
        Raises TypeaheadUnavailable when neither cluster answers."""
        expect_type(user_id, ObjectType.USER)
        asked = frozenset(SOURCES if sources is None else sources)
        if not asked or not asked <= frozenset(SOURCES):
            raise ValueError(f"a lookup's sources are some of {', '.join(s.name for s in SOURCES)}")
        tokens = tokenize(query)
        if not tokens:
            return LookupResult([], PRIMARY)
        probe = max(tokens, key=len)
        after_ms = self.settings.standby_after_ms
        errors = []
        for cluster in (PRIMARY, STANDBY):
            try:
                with within(after_ms / 1000) if after_ms and cluster == PRIMARY else contextlib.nullcontext():
                    matches = self._lookup(self.pair[cluster], user_id, query, probe, limit, order, asked)
                return LookupResult(matches, cluster)
            except (HBaseError, CorruptCell) as exc:
                errors.append(f"{cluster}: {exc}")
        raise TypeaheadUnavailable("; ".join(errors))

    def _lookup(
        self, pool: ClusterPool, user_id: int, query: str, probe: str, limit: int, order: Sequence[str] | None,
        sources: frozenset[Source],
    ) -> list[Match]:
        source_order = order or self.settings.source_order
        ranking = Ranking(query, source_order, limit)
        ranking.add(wide_candidates(pool, user_id, probe, sources))
        matches = ranking.top()
        tall = [s for s in TALL if s in sources]
        second = [SECOND_DEGREE] if SECOND_DEGREE in sources else []
        if _cannot_enter(matches, source_order, limit, tall + second):
            return matches
        if not _cannot_enter(matches, source_order, limit, tall):
            others = [t for t in ranking.query_tokens if t != probe]
            ranking.add(tall_candidates(pool, user_id, probe, self.settings.tall_scan_limit, others, tall))
            matches = ranking.top()
        if _cannot_enter(matches, source_order, limit, second):
            return matches
        ranking.add(second_candidates(pool, user_id))
        return ranking.top()

    def close(self) -> None:
        self.pair.close()
