"""An index entry (one contact in one user's source) and the HBase cells
that store it.

Wide table ``typeahead_wide``, row = owner (8 bytes, big-endian) + source
code (1 byte):
  * ``c:<token>\\0<contact key>`` = the contact, one column per name token
    (the lookup's ColumnPrefixFilter matches these);
  * ``m:<contact key>`` = the contact and its tokens ("member"), so a later
    change knows which token columns to delete without knowing old names.
Tall table ``typeahead_tall``, for sources with huge lists:
  * row owner + code + ``<token>\\0<contact key>``, column ``c:v`` = the contact
    and ``c:t`` = all its tokens (a prefix scan of owner + code + query token
    answers a lookup; a value filter on ``c:t`` checks the query's other tokens);
  * row owner + code + ``\\0<contact key>``, column ``c:m`` = the member record
    (tokens are never empty, so these rows never meet a lookup's scan).

Every cell of an entry carries the entry's ``version`` as its timestamp: the
newest update time of the app-data records it comes from (the follow
edges, the contact's name, the import). See docs/typeahead.md.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tasks.appdata.ids import split_id
from tasks.typeahead.sources import BY_CODE, Schema, Source
from tasks.typeahead.tables import TYPEAHEAD_TALL, TYPEAHEAD_WIDE
from tasks.typeahead.tokens import tokenize

SEPARATOR = b"\x00"
WIDE_TABLE = TYPEAHEAD_WIDE.name
TALL_TABLE = TYPEAHEAD_TALL.name
TOKEN_FAMILY = b"c:"
MEMBER_FAMILY = b"m:"
TALL_VALUE = b"c:v"
TALL_TOKENS = b"c:t"  # "|token|token|": what a lookup's value filter reads for a query's other tokens
TALL_MEMBER = b"c:m"
# Rows by table: {table: {row: {column: value}}}
Cells = dict[str, dict[bytes, dict[bytes, bytes]]]


class CorruptCell(ValueError):
    """A cell this code did not write (or a newer version did)."""


def owner_key(owner: int) -> bytes:
    return owner.to_bytes(8, "big")


def owner_ranges(owners: Iterable[int]) -> list[tuple[bytes, bytes]]:
    """Row ranges, ``[start, stop)``, holding every row of ``owners``: one
    per shard they are on, so owners of several shards never scan every
    shard's rows in between (a backfill page, one shard's consecutive
    users, is one range)."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for owner in owners:
        by_shard[split_id(owner).shard].append(owner)
    return [(owner_key(min(ids)), owner_key(max(ids) + 1)) for _shard, ids in sorted(by_shard.items())]


@functools.lru_cache(maxsize=65_536)
def row_prefix(owner: int, source: Source) -> bytes:
    """Cached: a backfill page asks for each of its owners' rows once per
    cell (about 80 times a user)."""
    return owner_key(owner) + source.code_byte


@functools.lru_cache(maxsize=65_536)
def token_set(name: str) -> tuple[str, ...]:
    """The distinct tokens a name is indexed under, sorted. Cached: an
    entry's cells ask for them twice, and a backfill page meets the same
    names again and again (tokenize was ~8% of a page's time)."""
    return tuple(sorted(set(tokenize(name))))


@dataclass(frozen=True, slots=True)
class Entry:
    owner: int
    source: Source
    key: str  # "u:<user id>", "e:<email>" or "x:<external id>"
    name: str
    user_id: int | None
    version: int

    @property
    def tokens(self) -> tuple[str, ...]:
        return token_set(self.name)

    def value(self) -> bytes:
        return _values(self.name, self.user_id)[0]

    def member_value(self) -> bytes:
        return _values(self.name, self.user_id)[1]

    def cells(self) -> Cells:
        return cells_of(self.owner, self.source, self.key, self.tokens, self.value(), self.member_value())

    def member_cell(self) -> Cell:
        return member_cell(self.owner, self.source, self.key, self.member_value())

    def token_cells(self) -> list[Cell]:
        return token_cells(self.owner, self.source, self.key, self.tokens, self.value())


@functools.lru_cache(maxsize=65_536)
def _values(name: str, user_id: int | None) -> tuple[bytes, bytes]:
    """A contact's cell value and member record value. Cached: a page's
    entries name the same contacts again and again (a celebrity's name is
    in every follower's index)."""
    value = json.dumps({"n": name, "u": user_id}, separators=(",", ":"), ensure_ascii=False).encode()
    member = {"n": name, "u": user_id, "t": list(token_set(name))}
    return value, json.dumps(member, separators=(",", ":"), ensure_ascii=False).encode()


def token_qualifier(token: str, key: str) -> bytes:
    return token.encode() + SEPARATOR + key.encode()


Cell = tuple[str, bytes, bytes, bytes]  # table, row, column, value


def token_cells(owner: int, source: Source, key: str, tokens: tuple[str, ...], value: bytes) -> list[Cell]:
    """The token cells of one entry, as ``(table, row, column, value)``."""
    prefix = row_prefix(owner, source)
    if source.schema is Schema.WIDE:
        return [(WIDE_TABLE, prefix, TOKEN_FAMILY + token_qualifier(t, key), value) for t in tokens]
    line = token_line(tokens)
    out: list[Cell] = []
    for t in tokens:
        row = prefix + token_qualifier(t, key)
        out += [(TALL_TABLE, row, TALL_VALUE, value), (TALL_TABLE, row, TALL_TOKENS, line)]
    return out


def member_cell(owner: int, source: Source, key: str, member: bytes) -> Cell:
    """Where one entry's member record lives, with ``member`` as its value."""
    if source.schema is Schema.WIDE:
        return WIDE_TABLE, row_prefix(owner, source), member_column(key), member
    return TALL_TABLE, member_row(owner, source, key), TALL_MEMBER, member


def cells_of(
    owner: int, source: Source, key: str, tokens: tuple[str, ...], value: bytes, member: bytes | None
) -> Cells:
    """The cells of one entry: its token cells, and its member record unless ``member`` is None."""
    flat = token_cells(owner, source, key, tokens, value)
    if member is not None:
        flat.append(member_cell(owner, source, key, member))
    out: Cells = {}
    for table, row, column, cell in flat:
        out.setdefault(table, {}).setdefault(row, {})[column] = cell
    return out


def token_line(tokens: tuple[str, ...]) -> bytes:
    """A tall row's token list, each token between bars: ``|<prefix>`` is
    in it exactly when some token starts with ``<prefix>``."""
    return ("|" + "|".join(tokens) + "|").encode()


def token_columns(owner: int, source: Source, key: str, tokens: tuple[str, ...]) -> Cells:
    """Where the token cells of ``tokens`` live (values empty, no member
    record): what a delete of those tokens names."""
    return cells_of(owner, source, key, tokens, b"", None)


def member_row(owner: int, source: Source, key: str) -> bytes:
    return row_prefix(owner, source) + SEPARATOR + key.encode()


def member_column(key: str) -> bytes:
    return MEMBER_FAMILY + key.encode()


def merge(into: Cells, more: Cells) -> Cells:
    for table, rows in more.items():
        target = into.setdefault(table, {})
        for row, columns in rows.items():
            target.setdefault(row, {}).update(columns)
    return into


# A lookup decodes a hundred cells or so: json.loads of bytes spends most of
# its time finding the encoding, which is always UTF-8 here.
_parse_json = json.JSONDecoder().raw_decode


def decode_contact(value: bytes) -> tuple[str, int | None]:
    try:
        text = value.decode()
        data: Any
        data, end = _parse_json(text)
        name, user_id = data["n"], data["u"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptCell(f"not a contact cell: {value[:60]!r}") from exc
    if end != len(text):
        raise CorruptCell(f"not a contact cell: {value[:60]!r}")
    if not isinstance(name, str) or not (user_id is None or isinstance(user_id, int)):
        raise CorruptCell(f"not a contact cell: {value[:60]!r}")
    return name, user_id


def member_tokens(value: bytes) -> tuple[str, ...]:
    """The tokens a member record lists (none if it is unreadable: the
    verify pass finds and repairs such rows)."""
    try:
        tokens = json.loads(value)["t"]
    except (ValueError, KeyError, TypeError):
        return ()
    return tuple(t for t in tokens if isinstance(t, str)) if isinstance(tokens, list) else ()


def split_wide_row(row: bytes) -> tuple[int, Source]:
    if len(row) != 9 or row[8] not in BY_CODE:
        raise CorruptCell(f"not a typeahead wide row: {row[:20]!r}")
    return int.from_bytes(row[:8], "big"), BY_CODE[row[8]]


def split_tall_row(row: bytes) -> tuple[int, Source, str | None, str]:
    """``(owner, source, token or None for a member row, contact key)``."""
    if len(row) < 11 or row[8] not in BY_CODE or SEPARATOR not in row[9:]:
        raise CorruptCell(f"not a typeahead tall row: {row[:40]!r}")
    token, _, key = row[9:].partition(SEPARATOR)
    return int.from_bytes(row[:8], "big"), BY_CODE[row[8]], token.decode() or None, key.decode()


def tall_row_key(row: bytes) -> bytes:
    """The contact key of a tall token row, undecoded, for a lookup whose
    scan range already fixes the row's owner and source: only the
    separator and a key are checked."""
    _token, separator, key = row[9:].partition(SEPARATOR)
    if not separator or not key:
        raise CorruptCell(f"not a typeahead tall row: {row[:40]!r}")
    return key


def group_by_version(items: list[tuple[int, Cells]]) -> dict[int, Cells]:
    out: dict[int, Cells] = defaultdict(dict)
    for version, cells in items:
        merge(out[version], cells)
    return dict(out)
