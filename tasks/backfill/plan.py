"""The pages of a run (pure). Users are paged per app-data shard by local
id (local ids are auto-increment): page k of a shard (from 1) covers local
ids ``(k - 1) * page_size + 1 .. k * page_size``, up to the shard's highest
user local id when the run started. Users made later are covered by the
real-time updates, so a run's plan never grows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PAGE_SIZE = 500
MAX_PAGE_SIZE = 10_000


def check_page_size(page_size: object) -> int:
    if type(page_size) is not int or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page size must be a whole number in 1..{MAX_PAGE_SIZE}, got {page_size!r}")
    return page_size


def pages_for(max_local: int, page_size: int) -> int:
    """How many pages cover local ids 1..``max_local``."""
    return -(-max_local // page_size) if max_local > 0 else 0


def local_range(page: int, page_size: int) -> tuple[int, int]:
    """The local ids (first, last, inclusive) of page ``page`` (from 1)."""
    if page < 1:
        raise ValueError(f"pages count from 1, got {page}")
    return (page - 1) * page_size + 1, page * page_size


@dataclass(frozen=True, slots=True)
class Plan:
    page_size: int
    pages: Mapping[int, int]  # shard -> pages (shards with no users have 0)

    @classmethod
    def from_max_locals(cls, max_locals: Mapping[int, int], page_size: int) -> Plan:
        check_page_size(page_size)
        return cls(page_size, {shard: pages_for(m, page_size) for shard, m in sorted(max_locals.items())})

    @property
    def total_pages(self) -> int:
        return sum(self.pages.values())

    def first_pages(self) -> list[int]:
        """The shards whose chain starts at page 1 (those with any page)."""
        return [shard for shard, n in self.pages.items() if n > 0]

    def next_page(self, shard: int, page: int) -> int | None:
        """The page after ``page`` in ``shard``'s chain, None at its end."""
        return page + 1 if page < self.pages.get(shard, 0) else None

    def has(self, shard: int, page: int) -> bool:
        return 1 <= page <= self.pages.get(shard, 0)
