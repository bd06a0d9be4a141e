"""Verify: compare the truth (MySQL) with a cluster for every user, repair
what differs, and repeat until a round finds nothing. Runs in the calling
process, page by page over every shard's users (the pages of a run).

A difference found again in the round after it was repaired comes to the
kind's ``repair`` with ``seen_before`` set: the same repair did not take,
so the kind may repair it another way (the feeds kind puts at the current
time instead of the follow's, past a delete marker that masks it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from tasks.appdata import objects
from tasks.appdata.ids import ObjectType
from tasks.backfill.kinds import BackfillContext, BackfillKind, Difference
from tasks.backfill.plan import DEFAULT_PAGE_SIZE, local_range
from tasks.backfill.runs import plan_for

DEFAULT_MAX_ROUNDS = 5
DEFAULT_THREADS = 4
SAMPLES = 5
# (round, pages done, pages in the round) after each page.
PageCallback = Callable[[int, int, int], None]


@dataclass(frozen=True, slots=True)
class Round:
    number: int
    differences: int
    repaired: int  # cells written or deleted by the repairs
    samples: list[Difference] = field(default_factory=list)  # a few, for people


def _check_page(
    ctx: BackfillContext, kind: BackfillKind, cluster: str, number: int, previous: set[Difference],
    shard: int, page: int, page_size: int,
) -> tuple[list[Difference], int]:
    """One page: its differences (marked when the previous round found them
    too) and the cells its repair wrote."""
    first, last = local_range(page, page_size)
    users = objects.ids_in_local_range(ctx.store, ObjectType.USER, shard, first, last)
    if not users:
        return [], 0
    diffs = [dataclasses.replace(d, seen_before=d in previous) for d in kind.diff(ctx, cluster, users)]
    return diffs, kind.repair(ctx, cluster, diffs, number) if diffs else 0


def verify_round(
    ctx: BackfillContext, kind: BackfillKind, cluster: str, number: int, previous: set[Difference], *,
    page_size: int = DEFAULT_PAGE_SIZE, threads: int = DEFAULT_THREADS, on_page: PageCallback | None = None,
) -> tuple[Round, set[Difference]]:
    """One pass over every user, ``threads`` pages at a time (each page's
    users are independent of the others'): the round and its differences."""
    plan = plan_for(ctx.store, page_size)
    found: list[Difference] = []
    repaired = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="verify") as pool:
        futures = [pool.submit(_check_page, ctx, kind, cluster, number, previous, shard, page, page_size)
                   for shard, pages in plan.pages.items() for page in range(1, pages + 1)]
        for done, future in enumerate(as_completed(futures), 1):
            diffs, cells = future.result()
            found += diffs
            repaired += cells
            if on_page is not None:
                on_page(number, done, plan.total_pages)
    return Round(number, len(found), repaired, found[:SAMPLES]), set(found)


def verify(
    ctx: BackfillContext, kind: BackfillKind, cluster: str, *, max_rounds: int = DEFAULT_MAX_ROUNDS,
    page_size: int = DEFAULT_PAGE_SIZE, threads: int = DEFAULT_THREADS, on_page: PageCallback | None = None,
    on_round: Callable[[Round], None] | None = None,
) -> list[Round]:
    """Rounds until one finds no difference, or ``max_rounds`` of them."""
    if type(max_rounds) is not int or max_rounds < 1:
        raise ValueError(f"max rounds must be a whole number >= 1, got {max_rounds!r}")
    rounds: list[Round] = []
    previous: set[Difference] = set()
    for number in range(1, max_rounds + 1):
        result, previous = verify_round(ctx, kind, cluster, number, previous, page_size=page_size, threads=threads,
                                        on_page=on_page)
        rounds.append(result)
        if on_round is not None:
            on_round(result)
        if result.differences == 0:
            break
    return rounds
