"""``pinlater migrate``'s runner, for every kind of store.

Each kind keeps, in its ``layout`` module, an ordered registry
``{from_version: Step}`` for its shards and one for its control stores; the
current layout is one past the last step (``pinlater.stores.layout``).
Adding a step is a few lines there: a function, an entry in the kind's
``steps``, and the same change in what creates new stores. A step is frozen
once released.

The runner brings a store up one step at a time and records each new
version as soon as its step is done, so a crash loses at most the step
under way, which runs again (steps are idempotent) when migrate is re-run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic

from pinlater.stores.layout import Kind, LayoutError, Step, Target

if TYPE_CHECKING:
    from pinlater.settings import Settings


def record_only(_target: object) -> None:
    """A step whose change is the version record itself, which the runner
    writes after every step."""


@dataclass(frozen=True)
class Store(Generic[Target]):
    """One store as the runner sees it."""

    where: str
    kind: Kind[Target]
    read: Callable[[bool], int]  # stamp_new -> version (0: new, unrecorded)
    write: Callable[[int], None]
    apply: Callable[[Step[Target]], None]


def upgrade(store: Store[Target], dry_run: bool, say: Callable[[str], None]) -> None:
    """Bring ``store`` to its kind's current layout, one step at a time."""
    current = store.kind.current
    stored = store.read(not dry_run)
    if stored == 0:
        say(f"{store.where}: new, would record layout {current}")
        return
    if stored > current:
        raise LayoutError(
            f"{store.where} has storage layout {stored}, newer than this PinLater knows ({current}):"
            " upgrade PinLater"
        )
    if stored == current:
        say(f"{store.where}: layout {current}, up to date")
        return
    say(f"{store.where}: layout {stored}, current {current}")
    for version in range(stored, current):
        step = store.kind.steps[version]
        if dry_run:
            say(f"{store.where}: would run step {version} -> {version + 1}: {step.description}")
            continue
        say(f"{store.where}: step {version} -> {version + 1}: {step.description}")
        store.apply(step)
        store.write(version + 1)
    if not dry_run:
        say(f"{store.where}: now at layout {current}")


def migrate(settings: Settings, dry_run: bool, say: Callable[[str], None]) -> None:
    """Every shard, then the control store, each by its kind's migration;
    stops at the first error (a re-run resumes where it stopped)."""
    from pinlater.stores import kind_of

    targets = [(spec.url, True, f"shard {spec.id}") for spec in settings.shards]
    targets.append((settings.resolved_control_url, False, "control store"))
    for url, is_shard, label in targets:
        kind = kind_of(url, "store")
        kind.migrate(url, is_shard, f"{label} ({kind.name})", settings.socket_timeout_s, dry_run, say)
