"""The memory kind (``memory://``): shards and a control store held by the
process, for tests and single-process use; one control store per URL
within a process. Nothing is durable, so nothing migrates."""

from __future__ import annotations

from pinlater.stores import Say, StoreKind
from pinlater.stores.memory.control import MemoryControlStore
from pinlater.stores.memory.shard import MemoryBackend


def _open_shard(shard_id: str, url: str, socket_timeout_s: float) -> MemoryBackend:
    return MemoryBackend(shard_id)


def _open_control(url: str, socket_timeout_s: float) -> MemoryControlStore:
    return MemoryControlStore.shared(url)


def migrate(url: str, is_shard: bool, where: str, timeout_s: float, dry_run: bool, say: Say) -> None:
    say(f"{where}: kept in memory, nothing to migrate")


KIND = StoreKind("memory", ("memory",), _open_shard, _open_control, migrate)
