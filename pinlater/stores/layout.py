"""The layout version each store records, and what opening a store checks.

Every durable shard and control store records the layout it was made with,
where its kind keeps such things (its ``layout`` module: a key, a row of a
table). A store holding no data yet is
new and gets the current layout when first opened; one holding data without
a record was made before layouts were recorded and counts as layout 1.

Opening a store compares its layout with the code's (``accept``):

* newer than the code knows: refused (upgrade PinLater first);
* older, but every step since is marked compatible (the code runs on the
  old layout unchanged, e.g. only the record or an index is new): used, with
  one warning per process and store that ``pinlater migrate`` is due;
* older otherwise: refused until ``pinlater migrate`` has run.

The steps from one layout to the next are in each kind's ``layout`` module,
run by ``pinlater.stores.migrations``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pinlater.errors import StorageError

log = logging.getLogger(__name__)

Target = TypeVar("Target")


class LayoutError(StorageError):
    """The store's layout is not one this code can use."""


@dataclass(frozen=True)
class Step(Generic[Target]):
    """One migration step, from layout N to N+1. ``apply`` must be
    idempotent: a crash after it and before the new version is recorded
    runs it again. ``compatible``: code of layout N+1 still works on
    layout N, so a store not migrated yet stays usable."""

    description: str
    apply: Callable[[Target], None]
    compatible: bool


@dataclass(frozen=True)
class Kind(Generic[Target]):
    """One kind of store (a kind's shards, or its control stores).
    ``record``: where the version is kept (a key, a row); ``marker``:
    something every such store holding data has (a key, a table). ``steps``: from-version ->
    step; the current layout is one past the last step."""

    name: str
    record: str
    marker: str
    steps: dict[int, Step[Target]] = field(default_factory=dict)

    @property
    def current(self) -> int:
        return max(self.steps, default=0) + 1

    @property
    def usable_from(self) -> int:
        """The oldest layout this code still runs on."""
        version = self.current
        while version - 1 in self.steps and self.steps[version - 1].compatible:
            version -= 1
        return version


_warned: set[str] = set()


def accept(kind: Kind[Target], stored: int, where: str) -> None:
    """Raise LayoutError if code of ``kind.current`` cannot use a store at
    layout ``stored``; warn once if it can but a migration is due."""
    current = kind.current
    if stored > current:
        raise LayoutError(
            f"{where} has storage layout {stored}, newer than this PinLater knows ({current}):"
            " upgrade PinLater"
        )
    if stored < kind.usable_from:
        raise LayoutError(
            f"{where} has storage layout {stored}, this PinLater needs {current}: run `pinlater migrate`"
        )
    if stored < current and where not in _warned:
        _warned.add(where)
        log.warning("%s has storage layout %d, current is %d: run `pinlater migrate`", where, stored, current)
