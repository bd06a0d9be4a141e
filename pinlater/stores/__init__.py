"""The kinds of store the job service keeps its shards and control store in,
found by URL scheme.

A kind is a folder (``pinlater/stores/redis/``, ``mysql/``, ``memory/``)
holding all of it: its shard backend, its control store, its pool, its
layout versions and migration steps, its scripts or statements and its
error mapping. It registers one ``StoreKind`` under the entry-point group
``pinlater.stores`` (one line of ``pyproject.toml``), and the built-in kinds
are found the same way. Everything else (``open_backend``,
``open_control_store``, the settings' URL checks, ``pinlater migrate``, the
test suites) asks this registry, never a kind by name.

What every kind shares lives beside this module: the ShardBackend and
ControlStore protocols (``base``, ``control``), the layout record and the
migration runner (``layout``, ``migrations``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Protocol

from pinlater.kit.urls import redact
from pinlater.stores.base import ShardBackend, ShardUnavailable
from pinlater.stores.control import ControlStore

__all__ = [
    "ControlStore",
    "ShardBackend",
    "ShardUnavailable",
    "StoreKind",
    "kind_of",
    "kinds",
    "lazy",
    "open_backend",
    "open_control_store",
    "scheme_of",
]

GROUP = "pinlater.stores"
Say = Callable[[str], None]


def lazy(target: str) -> Callable[..., Any]:
    """``module:name.attr``, imported at its first call and called: a kind
    registers its functions so, so that finding the kinds loads none of
    their drivers."""
    module, _, path = target.partition(":")

    def call(*args: Any) -> Any:
        found: Any = import_module(module)
        for name in path.split("."):
            found = getattr(found, name)
        return found(*args)

    call.__qualname__ = target
    return call


def _no_check(url: str) -> None:
    """A kind whose URLs need no check beyond their scheme."""


@dataclass(frozen=True)
class StoreKind:
    """One kind of store.

    ``open_shard(shard_id, url, socket_timeout_s)`` and
    ``open_control(url, socket_timeout_s)`` open its stores (lazily: a dead
    server is noticed at first use); ``migrate(url, is_shard, where,
    socket_timeout_s, dry_run, say)`` brings one store to the current layout,
    printing each step with ``say``; ``check_url`` raises ValueError for a
    URL of its schemes it could never open. ``testing``: the module of the
    kind's test setups, for a kind that lives outside this tree (the test
    suites look in ``tests/support/kinds/<name>`` otherwise)."""

    name: str
    schemes: tuple[str, ...]
    open_shard: Callable[[str, str, float], ShardBackend]
    open_control: Callable[[str, float], ControlStore]
    migrate: Callable[[str, bool, str, float, bool, Say], None]
    check_url: Callable[[str], None] = _no_check
    testing: str | None = None


@cache
def kinds() -> tuple[StoreKind, ...]:
    """Every registered kind, in entry-point name order; two kinds claiming
    one scheme is a ValueError."""
    found: list[StoreKind] = []
    claimed: dict[str, str] = {}
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        kind = point.load()
        if not isinstance(kind, StoreKind):
            raise TypeError(f"entry point {point.name} of {GROUP} is not a StoreKind: {point.value}")
        if any(k.name == kind.name for k in found):
            continue  # one distribution seen twice on sys.path
        for scheme in kind.schemes:
            if scheme in claimed:
                raise ValueError(f"store kinds {claimed[scheme]} and {kind.name} both claim {scheme}://")
            claimed[scheme] = kind.name
        found.append(kind)
    return tuple(found)


def schemes() -> tuple[str, ...]:
    """Every scheme some kind opens, in registry order."""
    return tuple(scheme for kind in kinds() for scheme in kind.schemes)


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0]


def kind_of(url: str, what: str) -> StoreKind:
    """The kind whose scheme ``url`` has; ValueError naming ``what`` (e.g.
    "shard", "control store") and the redacted URL otherwise."""
    scheme = scheme_of(url)
    for kind in kinds():
        if scheme in kind.schemes:
            return kind
    raise ValueError(f"unsupported {what} URL {redact(url)!r}")


class ShardSpec(Protocol):
    """A shard as the settings name it (``pinlater.settings.ShardSpec``)."""

    @property
    def id(self) -> str: ...

    @property
    def url(self) -> str: ...


def open_backend(spec: ShardSpec, socket_timeout_s: float = 5.0) -> ShardBackend:
    return kind_of(spec.url, "shard").open_shard(spec.id, spec.url, socket_timeout_s)


def open_control_store(url: str, socket_timeout_s: float = 5.0) -> ControlStore:
    return kind_of(url, "control store").open_control(url, socket_timeout_s)
