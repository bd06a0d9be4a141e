"""Lookups: ``ContactsIndex.lookup(user, query, limit)``.

One scan of the user's wide rows (every wide source at once, the query's
longest token as a ColumnPrefixFilter) plus one prefix scan per tall source
(at most ``tall_scan_limit`` rows each), then ranking and de-duplication in
Python (``tasks.typeahead.rank``). Reads the primary; the standby when the
primary fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks.appdata.ids import ObjectType, expect_type
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool, HBaseError
from tasks.hbase.reads import prefix_filter, scan_range
from tasks.typeahead.entries import (
    SEPARATOR,
    TALL_TABLE,
    TALL_VALUE,
    TOKEN_FAMILY,
    WIDE_TABLE,
    CorruptCell,
    decode_contact,
    owner_key,
    row_prefix,
    split_tall_row,
    split_wide_row,
)
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.rank import Candidate, Contact, LookupResult, rank
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import TALL
from tasks.typeahead.tokens import tokenize


def _next_key(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else b""


def candidates(pool: ClusterPool, owner: int, probe: str, tall_limit: int) -> list[Candidate]:
    """Every contact of ``owner`` with a name token starting with ``probe``."""
    found: list[Candidate] = []
    token = probe.encode()
    for row, columns in scan_range(
        pool, WIDE_TABLE, start=owner_key(owner), stop=owner_key(owner + 1),
        columns=[TOKEN_FAMILY.rstrip(b":")], scan_filter=prefix_filter(token),
    ):
        _owner, source = split_wide_row(row)
        for column, value in columns.items():
            key = column[len(TOKEN_FAMILY):].partition(SEPARATOR)[2].decode()
            name, user_id = decode_contact(value)
            found.append(Candidate(source.name, Contact(key, name, user_id)))
    for source in TALL:
        start = row_prefix(owner, source) + token
        for row, columns in scan_range(
            pool, TALL_TABLE, start=start, stop=_next_key(start), columns=[TALL_VALUE], limit=tall_limit
        ):
            _owner, _source, _token, key = split_tall_row(row)
            name, user_id = decode_contact(columns[TALL_VALUE])
            found.append(Candidate(source.name, Contact(key, name, user_id)))
    return found


class ContactsIndex:
    def __init__(self, pair: ClusterPair, settings: TypeaheadSettings | None = None) -> None:
        self.pair = pair
        self.settings = settings or TypeaheadSettings.from_env()

    @classmethod
    def from_env(cls) -> ContactsIndex:
        return cls(ClusterPair.from_settings(), TypeaheadSettings.from_env())

    def lookup(
        self, user_id: int, query: str, limit: int = 10, *, order: Sequence[str] | None = None,
    ) -> LookupResult:
        """The best ``limit`` contacts of ``user_id`` whose name tokens start
        with the query's tokens. Raises TypeaheadUnavailable when neither
        cluster answers."""
        expect_type(user_id, ObjectType.USER)
        tokens = tokenize(query)
        if not tokens:
            return LookupResult([], PRIMARY)
        probe = max(tokens, key=len)
        errors = []
        for cluster in (PRIMARY, STANDBY):
            try:
                found = candidates(self.pair[cluster], user_id, probe, self.settings.tall_scan_limit)
            except (HBaseError, CorruptCell) as exc:
                errors.append(f"{cluster}: {exc}")
                continue
            matches = rank(query, found, order or self.settings.source_order, limit)
            return LookupResult(matches, cluster)
        raise TypeaheadUnavailable("; ".join(errors))

    def close(self) -> None:
        self.pair.close()
