"""The contact sources of the typeahead (docs/typeahead.md) and the HBase schema
each is stored in.

* ``mutual``, ``following``: from the follow graph, small per user: wide.
* ``followers``: a celebrity has millions, more than one HBase row should
  hold (a row never splits across regions): tall.
* ``social``, ``address_book``: imported lists (``tasks.appdata.contacts``),
  at most 5,000 contacts each: wide.
* ``second_degree``: the users your followees follow, counted; its counts
  change at no version of the owner's own: one listed cell per owner, of
  ids, counts and names, written whole (``tasks.typeahead.second``).

A source's one-byte code is part of its row keys: codes are forever; add
new sources with new codes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Schema(enum.Enum):
    WIDE = "wide"  # one row per (user, source); a column per name token + contact
    TALL = "tall"  # a row per name token + contact, neighbours per (user, source)
    LISTED = "listed"  # one cell per user listing contact ids; names in a row per contact


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """One of the constants below, compared and hashed by identity: every
    index place holds one, and a backfill page hashes places millions of
    times (a generated field-by-field hash was a tenth of its CPU). A copy
    or an unpickled one is the constant again."""

    name: str
    code: int
    schema: Schema
    imported: bool = False  # filled from imports, not from the follow graph

    @property
    def code_byte(self) -> bytes:
        return bytes([self.code])

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return source_named, (self.name,)


MUTUAL = Source("mutual", 1, Schema.WIDE)
FOLLOWING = Source("following", 2, Schema.WIDE)
FOLLOWERS = Source("followers", 3, Schema.TALL)
SOCIAL = Source("social", 4, Schema.WIDE, imported=True)
ADDRESS_BOOK = Source("address_book", 5, Schema.WIDE, imported=True)
SECOND_DEGREE = Source("second_degree", 6, Schema.LISTED)

SOURCES: tuple[Source, ...] = (MUTUAL, FOLLOWING, FOLLOWERS, SOCIAL, ADDRESS_BOOK, SECOND_DEGREE)
BY_NAME = {s.name: s for s in SOURCES}
BY_CODE = {s.code: s for s in SOURCES}
GRAPH_SOURCES = (MUTUAL, FOLLOWING, FOLLOWERS)
IMPORTED = tuple(s for s in SOURCES if s.imported)
WIDE = tuple(s for s in SOURCES if s.schema is Schema.WIDE)
TALL = tuple(s for s in SOURCES if s.schema is Schema.TALL)

# Mutual follows are the strongest signal (Pinterest's typeahead), then whom the user
# follows, then people from their own networks, then followers; people two
# hops away, whom the user has no tie to yet, last.
DEFAULT_ORDER = ("mutual", "following", "social", "address_book", "followers", "second_degree")


class UnknownSource(ValueError):
    pass


def source_named(name: str) -> Source:
    try:
        return BY_NAME[name]
    except KeyError:
        raise UnknownSource(f"unknown contact source {name[:40]!r}; known: {', '.join(BY_NAME)}") from None


def parse_order(text: str) -> tuple[str, ...]:
    """A ranking order from ``"mutual,following,..."``: known names, each once."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        source_named(name)
    if len(set(names)) != len(names):
        raise UnknownSource(f"a source is listed twice in the ranking order {text[:80]!r}")
    return names


MAX_FILTER_CHARS = 256


def parse_filter(text: str) -> frozenset[Source]:
    """The sources a lookup is limited to, from ``"mutual,following"``:
    known names, at least one (repeats are harmless)."""
    if len(text) > MAX_FILTER_CHARS:
        raise UnknownSource(f"sources must be at most {MAX_FILTER_CHARS} characters, got {len(text)}")
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownSource(f"sources names at least one of {', '.join(BY_NAME)}")
    return frozenset(source_named(n) for n in names)
