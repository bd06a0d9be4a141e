"""How a worker process (and a Contacts Service process, which runs the
same page functions for its callers, and the HTTP endpoints serving
lookups and feed reads) runs Python's cyclic garbage collector.

A task that works on a page at a time (a typeahead backfill page, a feed
fan-out page) keeps a few hundred thousand small containers alive until it
ends: entries, places, versions. Each of them counts towards the
collector's next full collection, which walks every tracked object of the
process, so a page paid for several full walks of everything it had built.
Measured on backfill pages over a filled index (pages alternated between
settings in one process): 1.2-1.4 ms of CPU a user with the defaults,
0.8 with full collections ten times rarer.

A process serving reads has the same collector: a full collection stops
every request thread while it walks the process. In a process answering
typeahead lookups at 200/s beside a backfill, the phases that met one had
a pause of 60-100 ms, and its lookups' p99 with it.

So every such process, once started: full collections ten times rarer
(young collections as before: cycles of short-lived objects still go
quickly), and the objects it started with frozen out of every collection
(``gc.freeze``: they live as long as the process, and walking them would
also write to memory a forked process shares with its parent).
"""

from __future__ import annotations

import gc

YOUNG, MIDDLE, FULL = 700, 10, 100  # Python's defaults are 700, 10, 10


def tune_gc() -> None:
    """This process's collector set as the module says: call it once, when
    a worker process has started and imported what it needs."""
    gc.set_threshold(YOUNG, MIDDLE, FULL)
    gc.freeze()
