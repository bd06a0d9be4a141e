"""A typeahead without HBase for the endpoint and page tests: a fixed
contact book per owner, ranked with ``rank`` like the index does, and owners
whose lookups fail the way the index's can."""

from __future__ import annotations

import time

from tasks.appdata.ids import ObjectType, make_id
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.rank import Candidate, Contact, LookupResult, rank
from tasks.typeahead.sources import Source

SOURCES = ["mutual", "following", "facebook", "gmail"]
OWNER = make_id(0, ObjectType.USER, 1)
EMPTY_OWNER = make_id(0, ObjectType.USER, 2)
DOWN_OWNER = make_id(0, ObjectType.USER, 3)  # the index raises TypeaheadUnavailable
BROKEN_OWNER = make_id(0, ObjectType.USER, 4)  # the index has a bug
DOWN_CAUSE = "hbase primary: connection refused; hbase standby: timed out"


def uid(local: int) -> int:
    return make_id(1, ObjectType.USER, local)


def _book() -> list[Candidate]:
    people = [
        ("mutual", "John Michael Smith", uid(1)),
        ("mutual", "Jo March", uid(2)),
        ("following", "John Smith", uid(3)),
        ("following", "Johanna Schmidt", uid(4)),
        ("facebook", "John Smith", uid(3)),  # the same person as in following
        ("facebook", "Smith John", uid(5)),
        ("facebook", "Jon Snow", uid(6)),
        ("gmail", "Johnny Smithers", uid(7)),
        ("gmail", "José Álvarez", None),
        ("gmail", "<img src=x onerror=alert(1)> Johnson", None),  # a hostile name is shown as text
        ("following", "Jane Doe", uid(8)),
        ("twitter", "John Smyth", uid(9)),  # a source the order does not know: after the others
    ]
    candidates = []
    for source, name, user_id in people:
        key = f"u:{user_id}" if user_id is not None else f"e:{name.split()[0].lower()}@example.com"
        candidates.append(Candidate(source, Contact(key, name, user_id)))
    return candidates


BOOK = {OWNER: _book(), EMPTY_OWNER: []}


class FakeIndex:
    """``lookup`` as the server takes it; ``delay_s(query)`` slows answers
    (the page test makes stale requests slower than newer ones)."""

    def __init__(self, delay_s: dict[str, float] | None = None) -> None:
        self.delay_s = delay_s or {}
        self.calls: list[tuple[int, str, int]] = []
        self.filters: list[frozenset[Source] | None] = []

    def lookup(self, user_id: int, query: str, limit: int, *, sources: frozenset[Source] | None = None) -> LookupResult:
        self.calls.append((user_id, query, limit))
        self.filters.append(sources)
        time.sleep(self.delay_s.get(query, 0.0))
        if user_id == DOWN_OWNER:
            raise TypeaheadUnavailable(DOWN_CAUSE)
        if user_id == BROKEN_OWNER:
            raise RuntimeError("a bug")
        book = BOOK.get(user_id, [])
        if sources is not None:
            book = [c for c in book if c.source in {s.name for s in sources}]
        return LookupResult(rank(query, book, SOURCES, limit), "primary")
