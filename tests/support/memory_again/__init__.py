"""A fourth store kind, to show what adding one takes: this folder and one
entry-point line (``memory2 = "tests.support.memory_again:KIND"`` in the
group ``pinlater.stores``). It registers the memory kind's classes a second
time under ``memory2://``; its test setup is in ``testing``.
``tests/contract/test_new_kind.py`` registers it through a dist-info of its
own and runs the contract suite on it alone."""

from __future__ import annotations

from pinlater.stores import Say, StoreKind
from pinlater.stores.memory.control import MemoryControlStore
from pinlater.stores.memory.shard import MemoryBackend


def _open_shard(shard_id: str, url: str, socket_timeout_s: float) -> MemoryBackend:
    return MemoryBackend(shard_id)


def _open_control(url: str, socket_timeout_s: float) -> MemoryControlStore:
    return MemoryControlStore.shared(url)


def _migrate(url: str, is_shard: bool, where: str, timeout_s: float, dry_run: bool, say: Say) -> None:
    say(f"{where}: kept in memory, nothing to migrate")


def _check_url(url: str) -> None:
    if "?" in url:
        raise ValueError("memory2 URL: takes no query")


KIND = StoreKind(
    "memory2", ("memory2",), _open_shard, _open_control, _migrate, _check_url,
    testing="tests.support.memory_again.testing",
)
