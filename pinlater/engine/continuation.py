"""Scan continuations across shards and priorities.

Scans return jobs newest sort time first. Ties are broken by (shard id,
priority, local id), all descending, which makes a total order over the
whole cluster; a continuation is the key of the last job returned, and each
(shard, priority) source resumes strictly after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pinlater.errors import ContinuationInvalid
from pinlater.limits import MAX_PRIORITIES, MAX_TIMESTAMP_MS
from pinlater.models import CONTINUATION_END, CONTINUATION_START

_MAX_ID = 2**63 - 1
# What encode() writes, ASCII only: str.isdigit() takes "²" and other
# scripts' digits, and "$" in a pattern lets a trailing newline through.
_KEY = re.compile(r"([0-9]{1,16}):([A-Za-z0-9]{1,64}):([0-9]{1,3}):([0-9]{1,19})")


@dataclass(frozen=True, slots=True, order=True)
class ScanKey:
    sort_time: int
    shard: str
    priority: int
    local_id: int

    def encode(self) -> str:
        return f"{self.sort_time}:{self.shard}:{self.priority}:{self.local_id}"


def decode(continuation: str) -> ScanKey | None:
    """None means start from the newest job."""
    if continuation in ("", CONTINUATION_START):
        return None
    if continuation == CONTINUATION_END:
        raise ContinuationInvalid("the scan already ended (continuation -1)")
    match = _KEY.fullmatch(continuation) if isinstance(continuation, str) else None
    try:
        if match is None:
            raise ValueError
        key = ScanKey(int(match[1]), match[2], int(match[3]), int(match[4]))
        # Numbers reach the shards' queries and scripts: only what a scan can have returned.
        if key.sort_time > MAX_TIMESTAMP_MS or not 1 <= key.priority <= MAX_PRIORITIES or key.local_id > _MAX_ID:
            raise ValueError
        return key
    except ValueError:
        raise ContinuationInvalid(f"malformed scan continuation {str(continuation)[:100]!r}") from None


def source_cursor(after: ScanKey | None, shard: str, priority: int) -> tuple[int, int] | None:
    """The (sort_time, local_id) cursor one (shard, priority) resumes after."""
    if after is None:
        return None
    mine = (shard, priority)
    theirs = (after.shard, after.priority)
    if mine == theirs:
        return (after.sort_time, after.local_id)
    if mine < theirs:
        # In descending order this source's ties at sort_time come after the key.
        return (after.sort_time, _MAX_ID)
    return (after.sort_time, 0)
