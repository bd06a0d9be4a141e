"""The Redis kind's layout: where a store records its version (key
``pl:layout`` of a shard, ``plc:layout`` of a control store), the check made
on open, and the migration steps of each (``pinlater.stores.migrations``
runs them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import redis

from pinlater.errors import ShardConnectionFailed
from pinlater.stores.layout import Kind, Step, Target, accept
from pinlater.stores.migrations import Store, record_only, upgrade
from pinlater.stores.redis import keys, loader
from pinlater.stores.redis.errors import redis_guard
from pinlater.stores.redis.pool import open_redis

T = TypeVar("T")


def redis_layout(client: redis.Redis[bytes], kind: Kind[Target], stamp_new: bool) -> int:
    """The store's layout (0: new and, without ``stamp_new``, unrecorded)."""
    script = client.register_script(loader.checked_source("pinlater.stores.redis", "layout"))
    args = [kind.current if stamp_new else ""]
    return int(script(keys=[kind.record, kind.marker], args=args, client=client))


def write_redis_layout(client: redis.Redis[bytes], kind: Kind[Target], version: int) -> None:
    client.set(kind.record, version)


def check_redis_layout(
    client: redis.Redis[bytes], kind: Kind[Target], where: str, unavailable: Callable[[str], Exception]
) -> int:
    """What a Redis store does before its first command: record the layout
    of a new store, refuse one this code cannot use (LayoutError). Returns
    the store's layout, for what a store writes only from some layout on."""
    with redis_guard(where, unavailable):
        stored = redis_layout(client, kind, stamp_new=True)
    accept(kind, stored, where)
    return stored


def _redis_jobs_to_records(client: redis.Redis[bytes]) -> None:
    """Layout 2 -> 3 of a Redis shard (``upgrade``)."""
    from pinlater.stores.redis.upgrade import upgrade_to_v3

    upgrade_to_v3(client)


def _redis_index_keyed_jobs(client: redis.Redis[bytes]) -> None:
    """Layout 5 -> 6 of a Redis shard (``upgrade``)."""
    from pinlater.stores.redis.upgrade import index_keyed_jobs

    index_keyed_jobs(client)


REDIS_SHARD: Kind[redis.Redis[bytes]] = Kind(
    "redis shard", keys.SHARD_LAYOUT, keys.QUEUES,
    {
        1: Step("record the layout version (key pl:layout)", record_only, compatible=True),
        # Incompatible: this code reads layout-3 jobs only, so a shard is
        # refused until migrate has converted its jobs.
        2: Step(
            "pack each job into one field of its priority's jobs hash (pl:{queue}:p{N}:jobs)",
            _redis_jobs_to_records,
            compatible=False,
        ),
        # Compatible: nothing is rewritten. Layout-3 code would read a trace
        # section as body, so traces were written only from layout 4 on,
        # which such code refuses (this code runs on layout 6 only).
        3: Step("job records may carry their trace context (the record's flag 16)", record_only, compatible=True),
        # Compatible, as the trace: layout-4 code would read a key as body,
        # so keys were written only from layout 5 on.
        4: Step(
            "job records may carry a fairness key (the record's flag 32); a priority with keyed jobs keeps lanes",
            record_only, compatible=True,
        ),
        # Incompatible: code of layout 5 serves lane '' from a copy this
        # layout no longer keeps, and this code counts on the index of
        # keyed jobs, which that code does not write.
        5: Step(
            "a priority that keeps lanes indexes its keyed pending jobs (pl:{queue}:p{N}:keyed); "
            "lane '' is no longer a copy (pl:{queue}:p{N}:lane: goes)",
            _redis_index_keyed_jobs,
            compatible=False,
        ),
    },
)


def _redis_index_done_batches(client: redis.Redis[bytes]) -> None:
    """Layout 2 -> 3 of a Redis control store (``upgrade``)."""
    from pinlater.stores.redis.upgrade import index_done_batches

    index_done_batches(client)


REDIS_CONTROL: Kind[redis.Redis[bytes]] = Kind(
    "redis control store", keys.CONTROL_LAYOUT, keys.CONTROL_QUEUES,
    {
        1: Step("record the layout version (key plc:layout)", record_only, compatible=True),
        # Compatible: only an index is new. Until migrate, batches released
        # or cancelled before this code ran are kept, not dropped when old.
        2: Step("released and cancelled batches are indexed by the ms each last changed (plc:batches:done)",
                _redis_index_done_batches, compatible=True),
    },
)


def migrate(url: str, is_shard: bool, where: str, timeout_s: float, dry_run: bool, say: Callable[[str], None]) -> None:
    """Bring the Redis store at ``url`` up to the current layout."""
    _upgrade_redis(REDIS_SHARD if is_shard else REDIS_CONTROL, url, where, timeout_s, dry_run, say)


def _upgrade_redis(
    kind: Kind[redis.Redis[bytes]], url: str, where: str, timeout_s: float, dry_run: bool, say: Callable[[str], None]
) -> None:
    client = open_redis(url, timeout_s)

    def guarded(fn: Callable[[], T]) -> T:
        with redis_guard(where, ShardConnectionFailed):
            return fn()

    store = Store(
        where, kind,
        read=lambda stamp: guarded(lambda: redis_layout(client, kind, stamp)),
        write=lambda version: guarded(lambda: write_redis_layout(client, kind, version)),
        apply=lambda step: guarded(lambda: step.apply(client)),
    )
    try:
        upgrade(store, dry_run, say)
    finally:
        client.close()
        client.connection_pool.disconnect()
