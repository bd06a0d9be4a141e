"""The layout version each store records, and what opening a store checks.

Every Redis or MySQL shard and control store records the layout it was made
with: Redis in a key (``pl:layout``, ``plc:layout``), MySQL in a row of
``pinlater_meta`` (``shard`` or ``control``). A store holding no data yet is
new and gets the current layout when first opened; one holding data without
a record was made before layouts were recorded and counts as layout 1.

Opening a store compares its layout with the code's (``accept``):

* newer than the code knows: refused (upgrade PinLater first);
* older, but every step since is marked compatible (the code runs on the
  old layout unchanged, e.g. only the record or an index is new): used, with
  one warning per process and store that ``pinlater migrate`` is due;
* older otherwise: refused until ``pinlater migrate`` has run.

The steps from one layout to the next are in ``pinlater.storage.migrations``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from pinlater.errors import StorageError
from pinlater.kit.sqlblocks import named_blocks
from pinlater.storage import scripts
from pinlater.storage.errors import redis_guard

if TYPE_CHECKING:
    import redis

    from pinlater.storage.mysql_pool import Session

log = logging.getLogger(__name__)

Target = TypeVar("Target")
LAYOUT_SQL = named_blocks("pinlater.storage", "sql/layout.sql")


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
    """One kind of store. ``record``: the Redis key or the ``pinlater_meta``
    row holding the version; ``marker``: a key (Redis) or table (MySQL)
    every store of this kind holding data has. ``steps``: from-version ->
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


# -- Redis -------------------------------------------------------------------------


def redis_layout(client: redis.Redis[bytes], kind: Kind[Target], stamp_new: bool) -> int:
    """The store's layout (0: new and, without ``stamp_new``, unrecorded)."""
    script = client.register_script(scripts.checked_source("pinlater.storage", "layout"))
    args = [kind.current if stamp_new else ""]
    return int(script(keys=[kind.record, kind.marker], args=args, client=client))


def write_redis_layout(client: redis.Redis[bytes], kind: Kind[Target], version: int) -> None:
    client.set(kind.record, version)


# -- MySQL -------------------------------------------------------------------------


def mysql_layout(s: Session, kind: Kind[Target], stamp_new: bool) -> int:
    """The store's layout (0: new and, without ``stamp_new``, unrecorded)."""
    if s.scalar(LAYOUT_SQL("table_exists"), {"name": "pinlater_meta"}):
        s.execute(LAYOUT_SQL("meta_read"), {"name": kind.record})
        rows = s.fetchall()
        if rows:
            return int(rows[0][0])
    if s.scalar(LAYOUT_SQL("table_exists"), {"name": kind.marker}):
        return 1
    if not stamp_new:
        return 0
    s.execute(LAYOUT_SQL("meta_create"))
    s.execute(LAYOUT_SQL("meta_stamp"), {"name": kind.record, "version": kind.current})
    s.execute(LAYOUT_SQL("meta_read"), {"name": kind.record})
    return int(s.fetchone()[0])


def write_mysql_layout(s: Session, kind: Kind[Target], version: int) -> None:
    s.execute(LAYOUT_SQL("meta_write"), {"name": kind.record, "version": version})


# -- on open -----------------------------------------------------------------------


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


def check_mysql_layout(s: Session, kind: Kind[Target], where: str) -> int:
    """The MySQL counterpart, run by a pool's ``prepare`` before it makes
    the store's tables (so that a new store is told apart from an old one)."""
    stored = mysql_layout(s, kind, stamp_new=True)
    accept(kind, stored, where)
    return stored
