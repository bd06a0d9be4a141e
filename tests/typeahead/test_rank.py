"""match_score and rank: proximity scoring, source order, de-duplication by
Pinterest user id (else contact key), limits, and total determinism."""

from __future__ import annotations

import random

import pytest

from tasks.typeahead.rank import (
    MAX_LIMIT,
    Candidate,
    Contact,
    Match,
    Ranking,
    _one_token_score,
    _program_score,
    match_score,
    name_tokens,
    rank,
)
from tasks.typeahead.tokens import tokenize

ORDER = ["mutual", "following", "facebook", "gmail"]


def score(query: str, name: str) -> float | None:
    return match_score(tokenize(query), tokenize(name))


def names(matches: list[Match]) -> list[str]:
    return [m.contact.name for m in matches]


def cand(source: str, name: str, user_id: int | None = None, key: str | None = None) -> Candidate:
    return Candidate(source, Contact(key or (f"u:{user_id}" if user_id is not None else f"x:{name}"), name, user_id))


def test_exact_adjacent_and_complete_names_score_highest() -> None:
    best = score("john smith", "John Smith")
    assert best == 1.0
    assert best > score("john smith", "John Michael Smith")  # type: ignore[operator]
    assert best > score("john smith", "Johnny Smith")  # type: ignore[operator]
    reordered = score("john smith", "Smith John")
    assert reordered is not None and reordered < best
    # A gap in order beats reordering.
    assert score("john smith", "John Michael Smith") > reordered  # type: ignore[operator]
    # Fewer unmatched name tokens beat more.
    assert score("john", "John Smith") > score("john", "John Paul Smith")  # type: ignore[operator]
    # The first name token beats a later one for a one-token query.
    assert score("smith", "Smith Jones") > score("smith", "Jones Smith")  # type: ignore[operator]


@pytest.mark.parametrize(
    ("query", "name"),
    [("john sm", "John Smith"), ("jose alv", "José Álvarez"), ("sm jo", "John Smith"), ("obr", "O'Brien"),
     ("luc", "Jean-Luc Picard"), ("王", "王小明"), ("ив", "Иван Петров"), ("jo jo", "Jo John"), ("soren", "Søren")],
)
def test_matches(query: str, name: str) -> None:
    value = score(query, name)
    assert value is not None and 0 < value <= 1


@pytest.mark.parametrize(
    ("query", "name"),
    [("jo jo", "John Smith"),  # two query tokens cannot share one name token
     ("john smith x", "John Smith"), ("ohn", "John"), ("johnny", "John"), ("", "John"), ("john", ""),
     ("john", "!!!")],
)
def test_non_matches(query: str, name: str) -> None:
    assert score(query, name) is None


def test_best_assignment_is_found() -> None:
    # "jo" could take "Jo" or "John"; taking "John" first would leave "john" nothing.
    assert score("jo john", "John Jo") is not None
    # Eight identical prefixes against eight tokens: the search stays bounded and exact.
    assert score(" ".join(["a"] * 8), " ".join(["ab"] * 8)) == pytest.approx(0.4 * 0 + 0.3 + 0.2 + 0.1 * 0.5)


def test_rank_orders_by_source_then_score_then_name() -> None:
    candidates = [
        cand("gmail", "John Smith", 5),
        cand("facebook", "Johnny Smith", 6),
        cand("facebook", "John Smith", 7),
        cand("mutual", "John Michael Smith", 8),
        cand("zzz", "John Smith", 9),
        cand("aaa", "John Smith", 10),
        cand("facebook", "Jane Doe", 11),
    ]
    matches = rank("john sm", candidates, ORDER, 10)
    assert [(m.source, m.contact.user_id) for m in matches] == [
        ("mutual", 8), ("facebook", 7), ("facebook", 6), ("gmail", 5), ("aaa", 10), ("zzz", 9)]
    assert all(m.score == score("john sm", m.contact.name) for m in matches)


def test_duplicates_across_sources_show_the_best_source_once() -> None:
    candidates = [
        cand("following", "Ann Lee", 1),
        cand("mutual", "Ann Lee", 1),
        cand("gmail", "Annie Lee", 1, key="e:ann@example.com"),
        cand("gmail", "Ann Lee (work)", 1, key="e:ann@work.example"),  # the same person twice in one source
        cand("following", "Anna Berg", 2),
    ]
    matches = rank("ann", candidates, ORDER, 10)
    assert [(m.contact.user_id, m.source, m.sources) for m in matches] == [
        (1, "mutual", ("mutual", "following", "gmail")), (2, "following", ("following",))]
    assert matches[0].contact == Contact("u:1", "Ann Lee", 1)


def test_contacts_without_user_id_are_deduplicated_by_key_only() -> None:
    candidates = [
        cand("gmail", "Bob Stone", None, key="e:bob@example.com"),
        cand("outlook", "Bobby Stone", None, key="e:bob@example.com"),
        cand("gmail", "Bob Stone", None, key="e:bob@other.example"),  # same name, another key: another contact
        cand("facebook", "Bob Stone", 42, key="x:fb1"),  # a user id: not merged with keyed contacts
    ]
    matches = rank("bob", candidates, ORDER, 10)
    assert [(m.contact.key, m.sources) for m in matches] == [
        ("x:fb1", ("facebook",)), ("e:bob@example.com", ("gmail", "outlook")), ("e:bob@other.example", ("gmail",))]


def test_ties_are_broken_deterministically_whatever_the_input_order() -> None:
    candidates = [cand("gmail", name, None, key=f"e:{i}") for i, name in enumerate(
        ["Amy Fox", "amy fox", "Amy Fox", "Amy-Fox", "Amy Fox Jr"])]
    candidates += [cand("gmail", "Amy Fox", 3), cand("mutual", "Amy Fox", 3), cand("gmail", "Amy Fox", 4)]
    expected = rank("amy f", candidates, ORDER, 100)
    rng = random.Random(7)
    for _ in range(50):
        rng.shuffle(candidates)
        assert rank("amy f", candidates, ORDER, 100) == expected
    assert [m.contact.key for m in expected][:1] == ["u:3"]  # the mutual one
    assert len(expected) == 7


def test_limit_blank_queries_and_junk() -> None:
    candidates = [cand("gmail", f"Kim {i:02d}", i) for i in range(1, 30)]
    assert names(rank("kim", candidates, ORDER, 3)) == ["Kim 01", "Kim 02", "Kim 03"]
    assert rank("", candidates, ORDER, 5) == [] and rank(" -- ", candidates, ORDER, 5) == []
    for bad in [0, -1, MAX_LIMIT + 1, 2.0, True, "5"]:
        with pytest.raises(ValueError, match="limit must be"):
            rank("kim", candidates, ORDER, bad)  # type: ignore[arg-type]
    junk = [cand("gmail", n, None, key=f"x:{i}") for i, n in enumerate(["", "NaN", "\x00", "🙂", "nan" * 200])]
    assert [m.contact.key for m in rank("nan", junk, ORDER, 10)] == ["x:1", "x:4"]


def test_long_names_are_found_by_their_first_eight_tokens() -> None:
    long_name = " ".join(f"part{i}" for i in range(30)) + " zed"
    candidates = [cand("gmail", long_name, 1), cand("gmail", "x" * 5000 + " Smith", 2)]
    assert [m.contact.user_id for m in rank("part7 part0", candidates, ORDER, 5)] == [1]
    assert rank("zed", candidates, ORDER, 5) == [] and rank("smith", candidates, ORDER, 5) == []
    assert [m.contact.user_id for m in rank("xxxx", candidates, ORDER, 5)] == [2]


@pytest.mark.parametrize("bad", [dict(key=""), dict(name=None), dict(user_id=True), dict(user_id=-1),
                                 dict(user_id=float("nan"))])
def test_contacts_refuse_junk_fields(bad: dict[str, object]) -> None:
    fields: dict[str, object] = {"key": "u:1", "name": "A", "user_id": 1} | bad
    with pytest.raises(ValueError):
        Contact(**fields)  # type: ignore[arg-type]


def test_a_name_always_matches_the_query_of_its_own_tokens() -> None:
    rng = random.Random(11)
    alphabet = "abcé ø-'王И."
    for _ in range(1000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60)))
        tokens = tokenize(name)
        if not tokens:
            continue
        shuffled = rng.sample(tokens, len(tokens))
        assert score(" ".join(tokens), name) == pytest.approx(1.0)  # itself, in order: the best score
        assert score(" ".join(t[: rng.randrange(1, len(t) + 1)] for t in shuffled), name) is not None


def test_a_one_token_query_scores_what_the_dynamic_program_scores() -> None:
    # The one-token shortcut must give the program's floats exactly: ranks
    # compare scores, so a last-bit difference would reorder ties.
    rng = random.Random(5)
    words = ["jo", "john", "johnny", "j", "smith", "sm", "o", "oj", "jojo", "王", "иван"]
    for _ in range(3000):
        name_tokens = [rng.choice(words) for _ in range(rng.randrange(1, 9))]
        query = rng.choice(words)[: rng.randrange(1, 5)]
        assert _one_token_score(query, name_tokens) == _program_score([query], name_tokens), (query, name_tokens)
    assert _one_token_score("x", ["john"]) is None


def test_a_ranking_built_source_by_source_equals_rank_of_everything_so_far() -> None:
    """A lookup adds its sources' candidates one read at a time and looks at
    the answer in between: each answer is rank's of all the candidates so
    far (people seen in several parts, repeats, junk, ties), whatever the split."""
    rng = random.Random(7)
    first = ["Kim", "Kimberly", "Kip", "Amy", "Ann", "Anna", "Bob", "Kim-Ann"]
    last = ["Fox", "Ford", "Kim", "Anderson", ""]
    for _ in range(300):
        candidates = [
            cand(rng.choice([*ORDER, "elsewhere"]), f"{rng.choice(first)} {rng.choice(last)}".strip(),
                 user_id=rng.choice([None, *range(8)]), key=f"k:{rng.randrange(12)}")
            for _ in range(rng.randrange(0, 25))
        ]
        query, limit = rng.choice(["k", "ki", "an", "kim f", "a k", "zed", " - "]), rng.randint(1, 12)
        cuts = sorted(rng.sample(range(len(candidates) + 1), k=min(3, len(candidates) + 1)))
        ranking = Ranking(query, ORDER, limit)
        for start, stop in zip([0, *cuts], [*cuts, len(candidates)], strict=True):
            ranking.add(candidates[start:stop])
            assert ranking.top() == rank(query, candidates[:stop], ORDER, limit)


@pytest.mark.parametrize("name", ["John Smith", "José O'Brien-Łukasz, SMITH", "王小明", "", "a " * 20, "Ann  ann"])
def test_a_names_cached_tokens_are_its_tokens_and_cannot_be_changed(name: str) -> None:
    """A ranking reads a name's tokens from a cache shared by every lookup:
    they are tokenize's, in a tuple, so no caller can change them for the next."""
    assert name_tokens(name) == tuple(tokenize(name))
    assert type(name_tokens(name)) is tuple
