"""The id lookups' cache (``tasks.appdata.accountcache``) over a fake
MySQL and a fake clock: hits and misses each live their own lifetime, a
forgotten account is asked again, the size stays bounded whatever comes,
and an answer fetched across a forget is never kept."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tasks.appdata.accountcache import AccountCache


class FakeAccounts:
    def __init__(self) -> None:
        self.linked: dict[str, int] = {}
        self.asked: list[list[str]] = []
        self.during: Any = None  # runs inside a fetch, after MySQL answered

    def __call__(self, _store: Any, accounts: Iterable[str]) -> dict[str, int]:
        wanted = list(accounts)
        self.asked.append(wanted)
        found = {a: self.linked[a] for a in wanted if a in self.linked}
        if self.during is not None:
            self.during()
        return found


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def make(capacity: int = 100, hit: int = 60_000, miss: int = 5_000) -> tuple[AccountCache, FakeAccounts, Clock]:
    fake, clock = FakeAccounts(), Clock()
    return AccountCache(capacity, hit, miss, clock=clock, fetch=fake), fake, clock


def test_hits_and_misses_are_answered_from_the_cache_until_they_expire() -> None:
    cache, fake, clock = make()
    fake.linked["email:a@x"] = 7
    assert cache.resolve(None, ["email:a@x", "email:b@x"]) == {"email:a@x": 7}  # type: ignore[arg-type]
    fake.linked["email:b@x"] = 8  # linked behind the cache's back
    assert cache.resolve(None, ["email:a@x", "email:b@x"]) == {"email:a@x": 7}  # type: ignore[arg-type]
    assert len(fake.asked) == 1
    stats = cache.stats()
    assert (stats.hits, stats.negative_hits, stats.misses, stats.size) == (1, 1, 2, 2)
    clock.ms += 5_000  # the miss expires, the hit does not
    assert cache.resolve(None, ["email:a@x", "email:b@x"]) == {"email:a@x": 7, "email:b@x": 8}  # type: ignore[arg-type]
    assert fake.asked[-1] == ["email:b@x"]
    del fake.linked["email:a@x"]
    clock.ms += 55_000  # now the first hit is 60 s old
    assert cache.resolve(None, ["email:a@x"]) == {}  # type: ignore[arg-type]
    assert fake.asked[-1] == ["email:a@x"]


def test_a_forgotten_account_is_asked_again() -> None:
    cache, fake, _clock = make()
    assert cache.resolve(None, ["email:a@x"]) == {}  # type: ignore[arg-type]
    fake.linked["email:a@x"] = 3
    cache.forget(["email:a@x"])
    assert cache.resolve(None, ["email:a@x"]) == {"email:a@x": 3}  # type: ignore[arg-type]


def test_an_answer_fetched_across_a_forget_is_not_kept() -> None:
    cache, fake, _clock = make()
    # The link commits and is forgotten while the fetch that read before it is in flight.
    def link_meanwhile() -> None:
        fake.linked["email:a@x"] = 9
        cache.forget(["email:a@x"])

    fake.during = link_meanwhile
    assert cache.resolve(None, ["email:a@x"]) == {}  # type: ignore[arg-type]
    fake.during = None
    assert cache.resolve(None, ["email:a@x"]) == {"email:a@x": 9}  # type: ignore[arg-type]


def test_the_size_stays_bounded_under_100_000_distinct_misses() -> None:
    cache, fake, _clock = make(capacity=1_000)
    for start in range(0, 100_000, 500):
        assert cache.resolve(None, [f"email:{i}@x" for i in range(start, start + 500)]) == {}  # type: ignore[arg-type]
        assert cache.stats().size <= 1_000
    assert sum(map(len, fake.asked)) == 100_000
    # The most recent are the ones kept.
    cache.resolve(None, ["email:99999@x"])  # type: ignore[arg-type]
    assert sum(map(len, fake.asked)) == 100_000
    cache.resolve(None, ["email:0@x"])  # type: ignore[arg-type]
    assert sum(map(len, fake.asked)) == 100_001


def test_a_cache_of_size_zero_asks_every_time() -> None:
    cache, fake, _clock = make(capacity=0)
    for _ in range(3):
        cache.resolve(None, ["email:a@x"])  # type: ignore[arg-type]
    assert len(fake.asked) == 3 and cache.stats().size == 0


def test_negative_sizes_and_lifetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        AccountCache(-1)
