"""The PinLater queues of the typeahead's tasks (one task type each) and
the config each gets when first created (after that it is the operators').

* ``typeahead_update``: follows, unfollows and imports, a job per cluster;
* ``typeahead_rename``: the pages of a rename, a chain per cluster, at
  most ``RENAME_RATE`` pages a second by default, so a celebrity's rename
  (100 pages per million followers) never crowds out the rest of HBase's
  work. Operators turn the rate at run time (dashboard, ``pinlater``);
* ``typeahead_second``: the pages of a second_degree recompute after a
  follow or unfollow (the user's own, then a page of its followers a job),
  at most ``SECOND_RATE`` a second by default, for the same reason.

All write HBase, so all are capped as the feed writes are
(``WRITE_MAX_RUNNING`` jobs running at once each): a slow cluster holds
their work in PENDING.
"""

from __future__ import annotations

from typing import Any

from tasks.feeds.queues import CLAIM_TIMEOUT_MS, WRITE_MAX_RUNNING, WRITE_RETRY

__all__ = ["ALL", "CLAIM_TIMEOUT_MS", "RENAME", "RETRY", "SECOND", "UPDATE", "create_options"]

UPDATE = "typeahead_update"
RENAME = "typeahead_rename"
SECOND = "typeahead_second"
ALL = (UPDATE, RENAME, SECOND)
RENAME_RATE = 20.0
SECOND_RATE = 200.0

# All write HBase: retried through an outage of its cluster like the feed writes.
RETRY = {UPDATE: WRITE_RETRY, RENAME: WRITE_RETRY, SECOND: WRITE_RETRY}
RATES = {RENAME: RENAME_RATE, SECOND: SECOND_RATE}


def create_options(queue: str) -> dict[str, Any]:
    options: dict[str, Any] = {"retry": RETRY[queue], "claim_timeout_ms": CLAIM_TIMEOUT_MS,
                               "max_running": WRITE_MAX_RUNNING}
    if queue in RATES:
        options["max_dequeue_rate"] = RATES[queue]
    return options
