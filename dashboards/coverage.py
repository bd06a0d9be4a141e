"""Which shards a read or an operator action over a whole queue covered.

The job service's list, count, retry and delete calls go over the shards
in rotation and leave the others out without an error, as a worker's calls
do. An operator deciding from a count ("would delete 40 jobs") must know
when it leaves a shard out, so the dashboard says so in every answer of
such a call: ``partial`` and ``shards_skipped``, the shards out of rotation
at its start or its end, or whose health changed while it ran (it may have
read them or not; saying "maybe left out" is the safe side).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pinlater.operators import Operators

T = TypeVar("T")


def covered(operators: Operators, fn: Callable[[], T]) -> tuple[T, dict[str, Any]]:
    """``fn()``'s result, and ``{"partial", "shards_skipped"}`` for it."""
    before = operators.shard_status()
    result = fn()
    after = operators.shard_status()
    skipped = [
        sid for sid, now in after.items()
        if not now.healthy or sid not in before or not before[sid].healthy
        or before[sid].changed_at != now.changed_at
    ]
    return result, {"partial": bool(skipped), "shards_skipped": skipped}
