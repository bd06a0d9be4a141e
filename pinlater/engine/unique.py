"""Unique jobs (``Job.unique``): each unique key has one home shard, where
the job that holds it lives, so one shard's atomic step decides whether a
key is taken (``ShardBackend.enqueue_unique``) and two producers racing for
a key meet there.

The home is the shard with the highest hash of (shard, queue, key) among
every configured shard, healthy or not (rendezvous hashing): adding a
shard moves only the keys it wins, about 1/n of them, and while a home is
out of rotation its keys' enqueues are refused rather than stored where
the holder is not seen. A call's jobs with unique keys are stored home by
home, before those without, so a call that fails part way can be sent again
whole: what was stored is answered as duplicates, nothing is stored twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from pinlater.descriptor import descriptor_prefix
from pinlater.engine.core import Core
from pinlater.errors import EnqueueOutcomeUnknown, NoHealthyShards
from pinlater.models import Enqueued
from pinlater.stores.base import (
    EnqueueItem,
    Existing,
    ShardBackend,
    ShardBusy,
    ShardOutcomeUnknown,
    ShardUnavailable,
    ShardWriteRefused,
)


def home_shard(shards: Sequence[ShardBackend], queue: str, unique: str) -> ShardBackend:
    """The shard where the job holding ``unique`` in ``queue`` lives."""
    if len(shards) == 1:
        return shards[0]

    def weight(backend: ShardBackend) -> bytes:
        text = f"{backend.shard_id}\0{queue}\0{unique}".encode("utf-8", "surrogatepass")
        return hashlib.blake2b(text, digest_size=8).digest()

    return max(shards, key=weight)


PlainStore = Callable[[Core, str, Sequence[EnqueueItem]], list[str]]


def store_unique(core: Core, queue: str, items: Sequence[EnqueueItem], plain: PlainStore) -> Enqueued:
    """Stores the items of a call that has unique keys: each such item on
    its key's home shard, then the rest as ``plain`` (``store_items``)
    stores them. Their descriptors in order; a duplicate's is its holder's."""
    config = core.configs.get(queue)
    shards = core.shards.all()
    keyed = [index for index, item in enumerate(items) if item.unique]
    homes: dict[str, list[int]]
    if len(shards) == 1:
        homes = {shards[0].shard_id: keyed}
    else:
        homes = {}
        for index in keyed:
            homes.setdefault(home_shard(shards, queue, items[index].unique).shard_id, []).append(index)
    descriptors = [""] * len(items)
    duplicates: list[int] = []
    for shard_id, indexes in homes.items():
        batch = [items[i] for i in indexes]
        answers = _store_at_home(core, queue, shard_id, batch, config.unique_succeeded_ms, config.priorities)
        prefix = descriptor_prefix(queue, shard_id)
        for index, item, answer in zip(indexes, batch, answers, strict=True):
            if isinstance(answer, Existing):
                duplicates.append(index)
                descriptors[index] = f"{prefix}{answer.priority}:{answer.local_id}"
            else:
                descriptors[index] = f"{prefix}{item.priority}:{answer}"
    if len(keyed) < len(items):
        rest = [index for index, item in enumerate(items) if not item.unique]
        for index, descriptor in zip(rest, plain(core, queue, [items[i] for i in rest]), strict=True):
            descriptors[index] = descriptor
    return Enqueued(descriptors, sorted(duplicates))


def _store_at_home(
    core: Core, queue: str, shard_id: str, batch: list[EnqueueItem], succeeded_ms: int, priorities: int
) -> list[int | Existing]:
    backend = core.shards.get(shard_id)
    if not core.shards.is_healthy(shard_id):
        raise NoHealthyShards(
            f"enqueue to {queue} refused: shard {shard_id}, the home of {len(batch)} of its unique key(s), is out "
            "of rotation; sending the whole call again once it is back is safe (what was stored is a duplicate)")
    try:
        return core.shards.call(
            backend, "enqueue_unique", queue, lambda b: b.enqueue_unique(queue, batch, succeeded_ms, priorities))
    except ShardOutcomeUnknown as exc:
        raise EnqueueOutcomeUnknown(
            f"enqueue to {queue}: shard {shard_id} went silent after it was sent, so {len(batch)} job(s) with "
            f"unique keys may or may not be stored; sending the whole call again is safe ({exc})") from exc
    except (ShardUnavailable, ShardWriteRefused, ShardBusy) as exc:
        raise NoHealthyShards(
            f"enqueue to {queue} refused: shard {shard_id}, the home of {len(batch)} of its unique key(s), did not "
            f"take them ({exc}); sending the whole call again is safe (what was stored is a duplicate)") from exc
