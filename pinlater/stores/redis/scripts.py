"""The Lua scripts of the Redis backend: packing their arguments and
decoding their replies.

Each script is a ``.lua`` file next to this module (``lua/``), loaded by
``pinlater.stores.redis.loader``. ``_prelude.lua`` is prepended to every job
script so helpers (clock, job keys, status caps) exist in one copy only.

Batch scripts take their items as one JSON argument (decoded by the cjson
library built into Redis) plus bodies as separate binary arguments: packing
hundreds of small arguments cost more client time than the script itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pinlater.stores.base import ClaimedJob, Claims
from pinlater.stores.redis import keys, loader

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

JOB_SCRIPTS = (
    "enqueue",
    "dequeue",
    "ack_succeeded",
    "ack_failed",
    "checkpoint",
    "expire_claims",
    "running_owners",
    "lane_keys",
    "gc",
    "retry_failed",
    "release",
    "delete",
    "cancel",
    "count",
    "scan",
    "lookup",
    "create_queue",
    "delete_queue",
)
# Run by ``pinlater migrate`` only (pinlater.stores.redis.upgrade).
UPGRADE_SCRIPTS = ("upgrade_v3",)


def job_script_source(name: str) -> str:
    return loader.checked_source("pinlater.stores.redis", name, prelude="_prelude")


def register_job_scripts(client: redis.Redis[bytes]) -> dict[str, Script]:
    return loader.register(client, "pinlater.stores.redis", JOB_SCRIPTS, prelude="_prelude")


# -- arguments -----------------------------------------------------------------


def json_arg(items: list[Any]) -> str:
    """Batch items travel as one JSON argument (decoded by cjson in the
    script): packing one argument per field costs more than the script."""
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def with_claim(item: list[Any], claim: str | None) -> list[Any]:
    """A script item with its claim as the last field when it names one
    (the scripts read a missing field as "no claim: the source's")."""
    if claim is not None:
        item.append(claim)
    return item


def opt_arg(value: int | None) -> str:
    """Optional integer argument of a script: '' stands for None."""
    return "" if value is None else str(int(value))


@lru_cache(maxsize=1024)
def dequeue_keys(queue: str, priorities: tuple[int, ...], look_ahead: tuple[int, ...]) -> tuple[str, ...]:
    """The KEYS of a dequeue (see dequeue.lua): the same few per queue on
    every call, and making them cost ~3 µs per call."""
    ks: list[str] = []
    for p in priorities:
        ks += [keys.pending_key(queue, p), keys.running_key(queue, p), keys.jobs_key(queue, p)]
    ks += [keys.pending_key(queue, p) for p in look_ahead]
    return tuple(ks)


class KeyGroups:
    """Per-priority key groups of a batch call: each distinct priority gets
    one group of KEYS (in first-seen order); items refer to it by 1-based
    index."""

    def __init__(self, key_fn: Callable[[int], list[str]]) -> None:
        self._key_fn = key_fn
        self._index: dict[int, int] = {}
        self.keys: list[str] = []

    def of(self, priority: int) -> int:
        g = self._index.get(priority)
        if g is None:
            g = self._index[priority] = len(self._index) + 1
            self.keys.extend(self._key_fn(priority))
        return g


# -- replies -------------------------------------------------------------------


def claims(reply: Sequence[Any], claim: str) -> Claims:
    """Decode dequeue's reply: next priority (0: none; -1: none, the call
    stopped early and may be made again), the key that ended
    the call ('' none), then per job priority, id, body, allowed,
    remaining, trace, run_after, key."""
    # Positional: keywords cost ~0.2 µs more per job.
    jobs = [
        ClaimedJob(
            int(reply[i + 1]), int(reply[i]), bytes(reply[i + 2]), int(reply[i + 3]), int(reply[i + 4]), claim,
            reply[i + 5].decode("ascii") if reply[i + 5] else None, int(reply[i + 6]),
            reply[i + 7].decode() if reply[i + 7] else "",
        )
        for i in range(2, len(reply), 8)
    ]
    return Claims(jobs, max(int(reply[0]), 0) or None, reply[1].decode() if reply[1] else None)
