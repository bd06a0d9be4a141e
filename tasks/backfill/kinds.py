"""What a backfill of one kind does, and the registry of kinds by name.

A kind rebuilds one derived store (following feeds, the contacts index)
from the truth in app-data MySQL, for a page of users at a time:

- ``backfill``: write every user's cells, each at the source record's
  update time as its cell timestamp, so an older backfill write never hides
  a newer real-time one;
- ``diff``: what differs between the truth and the cluster, per user;
- ``repair``: fix those differences (``round_no`` counts verify rounds from
  1; a difference found again in the next round comes back with
  ``seen_before`` set, so a kind can repair it another way).

An app names its kinds in its manifest (``backfill_kinds``, found through
``pinlater.kit.apps``); they are loaded on first use, and a kit names no app.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pinlater.kit import apps
from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair, ClusterPool, TableDef
from tasks.hbase.tables import EnsuredTables


class UnknownKind(LookupError):
    pass


@dataclass
class BackfillContext:
    """What a kind works with: the app data, the clusters, and the
    environment its own settings come from."""

    store: AppData
    pair: ClusterPair
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    tables: EnsuredTables = field(init=False)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)

    def ready(self, cluster: str, table: TableDef) -> ClusterPool:
        """``cluster``'s pool, with ``table`` ensured there on first use in
        this context (raises ``HBaseError`` while the cluster is down)."""
        return self.tables.ready(cluster, table)


@dataclass(frozen=True, slots=True)
class Difference:
    """One thing that differs for one user; ``payload`` is the kind's own
    (hashable) description that its ``repair`` understands."""

    user_id: int
    what: str  # one line, for people
    payload: Hashable
    seen_before: bool = field(default=False, compare=False)  # also found in the previous round


class BackfillKind(Protocol):
    name: str

    def backfill(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> int:
        """Writes the users' cells on ``cluster``; the cells written."""
        ...

    def diff(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> list[Difference]: ...

    def repair(self, ctx: BackfillContext, cluster: str, diffs: Sequence[Difference], round_no: int) -> int:
        """Fixes ``diffs`` on ``cluster``; the cells written or deleted."""
        ...


_kinds: dict[str, BackfillKind] = {}
_loaded = False
_load_lock = threading.Lock()


def register(kind: BackfillKind) -> BackfillKind:
    if not kind.name.isidentifier():
        raise ValueError(f"backfill kind name {kind.name!r} must be an identifier")
    _kinds[kind.name] = kind
    return kind


def _load() -> None:
    global _loaded
    with _load_lock:
        if not _loaded:
            for app in apps.apps():
                for reference in app.backfill_kinds:
                    register(apps.load(reference))
            _loaded = True


def names() -> list[str]:
    _load()
    return sorted(_kinds)


def get(name: str) -> BackfillKind:
    _load()
    try:
        return _kinds[name]
    except KeyError:
        known = ", ".join(sorted(_kinds)) or "none"
        raise UnknownKind(f"unknown backfill kind {name!r} (known: {known})") from None
