"""Scoring, ranking and de-duplicating typeahead matches (docs/typeahead.md): pure
functions over the contacts the index found for a query's tokens.

A contact matches when every query token is a prefix of a distinct token of
its name. Matches are ordered by their source's place in the configured
``source_order`` (mutual followers first, say), then by weight (how many
followees follow a second_degree contact), then by proximity score;
a person found in several sources (the same Pinterest user id) is shown
once, from the best source, listing every source it was seen in.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tasks.typeahead.tokens import tokenize

MAX_LIMIT = 100

# The weights of match_score's four parts (they sum to 1, the best score).
EXACT_WEIGHT = 0.4
ORDER_WEIGHT = 0.3
COVERAGE_WEIGHT = 0.2
LENGTH_WEIGHT = 0.1
_IN_ORDER_WITH_GAP = 0.5  # the order credit of a token after the previous one, but not right after it


@dataclass(frozen=True, slots=True)
class Contact:
    """One contact of an owner in one source. ``key`` is unique within that
    owner and source: "u:<user id>", "e:<email>" or "x:<external id>"."""

    key: str
    name: str
    user_id: int | None

    def __post_init__(self) -> None:
        # Checked here, so junk from a source fails where it is made, not in a ranking.
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"contact key must be a non-empty str, got {self.key!r:.60}")
        if not isinstance(self.name, str):
            raise ValueError(f"contact name must be a str, got {type(self.name).__name__}")
        if self.user_id is not None and (type(self.user_id) is not int or self.user_id < 0):
            raise ValueError(f"contact user id must be a non-negative int or None, got {self.user_id!r:.60}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A contact as one source holds it: what the index hands to ``rank``.
    ``weight``: ranks it within its source before the score (second_degree's
    count of followees following the contact; 0 elsewhere)."""

    source: str
    contact: Contact
    weight: int = 0


@dataclass(frozen=True, slots=True)
class Match:
    """A ranked result: the contact as its best source holds it, that
    source, every source it was found in (best first) and its score there."""

    contact: Contact
    source: str
    sources: tuple[str, ...]
    score: float


@dataclass(frozen=True, slots=True)
class LookupResult:
    """What a lookup answers: the ranked matches and which cluster served them."""

    matches: list[Match]
    served_by: str


def match_score(query_tokens: Sequence[str], name_tokens: Sequence[str]) -> float | None:
    """None unless each query token is a prefix of a distinct name token;
    otherwise a proximity score in (0, 1], higher is better, for the best
    assignment of query tokens to name tokens:

        score = 0.4 * exact + 0.3 * order + 0.2 * coverage + 0.1 * length

    - exact: the share of query tokens equal to their name token (a whole
      token beats a prefix: "john" finds "John" above "Johnny");
    - order: per query token, 1 when its name token comes right after the
      previous query token's (the first query token: when it is the name's
      first token), 0.5 when after it with a gap, 0 when before it;
      averaged (in order and adjacent beats gaps, gaps beat reordering);
    - coverage: matched name tokens / name tokens (fewer unmatched is better);
    - length: the mean of len(query token) / len(its name token).

    Rounded to 6 places. The search is a dynamic program over (used name
    tokens, last position): at most 2**8 * 8 states of 8 steps each, since
    tokenize yields at most 8 tokens.
    """
    k, n = len(query_tokens), len(name_tokens)
    if k == 0 or k > n:
        return None
    if k == 1:
        return _one_token_score(query_tokens[0], name_tokens)
    return _program_score(query_tokens, name_tokens)


def _program_score(query_tokens: Sequence[str], name_tokens: Sequence[str]) -> float | None:
    """``match_score`` by the dynamic program, for 1 <= k <= n query tokens."""
    k, n = len(query_tokens), len(name_tokens)
    # options[i]: (position, per-token gain without order) of each name token query token i prefixes.
    options: list[list[tuple[int, float]]] = []
    for q in query_tokens:
        found = [
            (p, EXACT_WEIGHT * (t == q) + LENGTH_WEIGHT * len(q) / len(t))
            for p, t in enumerate(name_tokens) if t.startswith(q)
        ]
        if not found:
            return None
        options.append(found)
    layer: dict[tuple[int, int], float] = {(0, -1): 0.0}  # (used positions, last position) -> best sum
    for found in options:
        following: dict[tuple[int, int], float] = {}
        for (used, last), total in layer.items():
            for position, gain in found:
                if used >> position & 1:
                    continue
                order = 1.0 if position == last + 1 else _IN_ORDER_WITH_GAP if position > last else 0.0
                value = total + gain + ORDER_WEIGHT * order
                state = (used | 1 << position, position)
                if value > following.get(state, -math.inf):
                    following[state] = value
        if not following:
            return None  # two query tokens need the same name token ("jo jo" on "John Smith")
        layer = following
    return round(max(layer.values()) / k + COVERAGE_WEIGHT * k / n, 6)


def _one_token_score(q: str, name_tokens: Sequence[str]) -> float | None:
    """``match_score`` of a one-token query (most queries): the program's
    single step, the same arithmetic in the same order, so the same floats."""
    best = None
    for position, t in enumerate(name_tokens):
        if t.startswith(q):
            value = EXACT_WEIGHT * (t == q) + LENGTH_WEIGHT * len(q) / len(t)
            value += ORDER_WEIGHT * (1.0 if position == 0 else _IN_ORDER_WITH_GAP)
            if best is None or value > best:
                best = value
    return None if best is None else round(best + COVERAGE_WEIGHT * 1 / len(name_tokens), 6)


@functools.lru_cache(maxsize=32_768)
def name_tokens(name: str) -> tuple[str, ...]:
    """``tokenize(name)`` as a tuple, cached: lookups meet the same names
    again and again (every follower of a celebrity, in each of that
    account's lookups)."""
    return tuple(tokenize(name))


def rank(query: str, candidates: Iterable[Candidate], source_order: Sequence[str], limit: int) -> list[Match]:
    """The best ``limit`` (1..100) distinct matches of ``query``, in order:
    source (its place in ``source_order``; unknown sources after, by name),
    weight descending, score descending, name, key. One match per person: by user id when the
    contact has one, else by contact key; it keeps the best occurrence and
    lists all the sources it was seen in. A blank query matches nothing."""
    ranking = Ranking(query, source_order, limit)
    ranking.add(candidates)
    return ranking.top()


class Ranking:
    """``rank`` built up as candidates arrive (a lookup reads its sources one
    after another and looks at the answer between reads): each candidate is
    scored once, and ``top()`` after every ``add`` equals ``rank`` of all
    the candidates added so far."""

    def __init__(self, query: str, source_order: Sequence[str], limit: int) -> None:
        if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be a whole number in 1..{MAX_LIMIT}, got {limit!r:.40}")
        self.limit = limit
        self.query_tokens = tokenize(query)
        # The first place counts.
        self.places = {source: i for i, source in reversed(list(enumerate(source_order)))}
        self.best: dict[tuple[str, object], tuple[tuple[object, ...], Match]] = {}
        self.seen_in: dict[tuple[str, object], set[str]] = {}

    def source_key(self, source: str) -> tuple[int, int, str]:
        place = self.places.get(source)
        return (0, place, "") if place is not None else (1, 0, source)

    def add(self, candidates: Iterable[Candidate]) -> None:
        query_tokens, best, seen_in = self.query_tokens, self.best, self.seen_in
        if not query_tokens:
            return
        source_keys: dict[str, tuple[int, int, str]] = {}
        for candidate in candidates:
            contact = candidate.contact
            score = match_score(query_tokens, name_tokens(contact.name))
            if score is None:
                continue
            source = candidate.source
            person = ("user", contact.user_id) if contact.user_id is not None else ("key", contact.key)
            seen = seen_in.get(person)
            if seen is None:
                seen_in[person] = {source}
            else:
                seen.add(source)
            if (source_key := source_keys.get(source)) is None:
                source_key = source_keys[source] = self.source_key(source)
            user = -1 if contact.user_id is None else contact.user_id  # last: makes the order total
            key = (source_key, -candidate.weight, -score, contact.name.casefold(), contact.name, contact.key, user)
            held = best.get(person)
            if held is None or key < held[0]:
                best[person] = (key, Match(contact, source, (), score))

    def top(self) -> list[Match]:
        """The best ``limit`` matches of the candidates added so far."""
        ranked = sorted(self.best.items(), key=lambda item: item[1][0])[: self.limit]
        return [
            Match(match.contact, match.source, tuple(sorted(self.seen_in[person], key=self.source_key)), match.score)
            for person, (_, match) in ranked
        ]
