"""Id lookups with positive and negative caching: external account
("email:ann@example.com", "social:12345") to user id, as seed 003's
Contacts Service caches them, bounded in size, with one lifetime for hits
and a shorter one for misses (an account not linked yet is the common case
of an address book, and the one a link changes).

The cache never decides what the index ends up holding: the typeahead's
writes read it for their first look at the truth only, and check that
truth against MySQL itself after writing (``tasks.typeahead.writer``), so
a stale answer costs a round of writes, never a wrong entry. A link or
unlink forgets the account in the process that runs its fix-up, and every
other process's answer for it lives at most a lifetime.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tasks.appdata import contacts
from tasks.appdata.store import AppData, now_ms

Fetch = Callable[[AppData, Iterable[str]], dict[str, int]]


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    negative_hits: int
    misses: int
    size: int
    capacity: int


class AccountCache:
    """``resolve`` answers what ``contacts.resolve_accounts`` would, from
    answers at most ``hit_ttl_ms`` (found) or ``miss_ttl_ms`` (not linked)
    old; at most ``capacity`` accounts are kept, the least recently used
    going first. Thread-safe."""

    def __init__(self, capacity: int = 100_000, hit_ttl_ms: int = 60_000, miss_ttl_ms: int = 5_000, *,
                 clock: Callable[[], int] = now_ms, fetch: Fetch = contacts.resolve_accounts) -> None:
        if capacity < 0 or hit_ttl_ms < 0 or miss_ttl_ms < 0:
            raise ValueError("an account cache's capacity and lifetimes are at least 0")
        self.capacity = capacity
        self.hit_ttl_ms = hit_ttl_ms
        self.miss_ttl_ms = miss_ttl_ms
        self._clock = clock
        self._fetch = fetch
        self._lock = threading.Lock()
        # account -> (user id or None for "not linked", expiry ms)
        self._answers: OrderedDict[str, tuple[int | None, int]] = OrderedDict()
        self._hits = self._negative_hits = self._misses = 0
        self._forgets = 0  # a fetch that ran across a forget stores nothing: it may predate the link

    def resolve(self, store: AppData, accounts: Iterable[str]) -> dict[str, int]:
        """The user of each account that has one."""
        found: dict[str, int] = {}
        wanted: list[str] = []
        now = self._clock()
        with self._lock:
            for account in dict.fromkeys(accounts):
                answer = self._answers.get(account)
                if answer is None or answer[1] <= now:
                    wanted.append(account)
                    continue
                self._answers.move_to_end(account)
                if answer[0] is None:
                    self._negative_hits += 1
                else:
                    self._hits += 1
                    found[account] = answer[0]
            self._misses += len(wanted)
            forgets = self._forgets
        if not wanted:
            return found
        fetched = self._fetch(store, wanted)
        found.update(fetched)
        if self.capacity:
            now = self._clock()
            with self._lock:
                if forgets != self._forgets:
                    return found
                for account in wanted:
                    user = fetched.get(account)
                    self._answers[account] = (user, now + (self.miss_ttl_ms if user is None else self.hit_ttl_ms))
                    self._answers.move_to_end(account)
                while len(self._answers) > self.capacity:
                    self._answers.popitem(last=False)
        return found

    def forget(self, accounts: Iterable[str]) -> None:
        """Drops the answers for ``accounts`` (linked or unlinked just now)."""
        with self._lock:
            self._forgets += 1
            for account in accounts:
                self._answers.pop(account, None)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._negative_hits, self._misses, len(self._answers), self.capacity)
