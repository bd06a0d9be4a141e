"""Where a settle stops trusting an absence of unknown age
(docs/typeahead.md): it removes only the versions older than its own read
by more than ``CLOCK_MARGIN_MS``. A younger one may be a follow whose time
was taken before that read and whose write committed after it; a clock
slower than the margin makes one look stale, and only the settle's second
reading of the truth puts it back.
"""

from __future__ import annotations

import json

from tasks.typeahead.sources import FOLLOWING
from tasks.typeahead.truth import Slot
from tasks.typeahead.writer import CLOCK_MARGIN_MS, Version, plan

PLACE = (7, FOLLOWING, "u:9")
READ_AT = 1_800_000_000_000


def version(at: int) -> Version:
    return Version(at, json.dumps({"t": ["ann"]}).encode())


def retired(slot: Slot, versions: list[Version]) -> list[int]:
    return [at for place, at in plan([slot], {PLACE: versions}, READ_AT).members if place == PLACE]


def test_an_absence_of_unknown_age_keeps_versions_within_the_margin() -> None:
    slot = Slot(*PLACE, entry=None, gone_at=0)
    inside, edge, beyond = READ_AT - CLOCK_MARGIN_MS + 1, READ_AT - CLOCK_MARGIN_MS, READ_AT - CLOCK_MARGIN_MS - 1
    ahead = READ_AT + CLOCK_MARGIN_MS  # from a clock ahead of the reader's: never taken for stale
    assert retired(slot, [version(inside), version(edge), version(beyond), version(ahead)]) == [beyond]


def test_an_absence_with_its_time_removes_what_it_outdates_whatever_the_clocks() -> None:
    gone_at = READ_AT - 10
    slot = Slot(*PLACE, entry=None, gone_at=gone_at)
    assert retired(slot, [version(gone_at - 1), version(gone_at), version(gone_at + 1)]) == [gone_at - 1, gone_at]
