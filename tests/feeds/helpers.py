"""Helpers of the feed tests: apply write bodies as the write jobs would,
read a feed row back, make users and pins, hand out action times, make a
fanned-out feed, and a port that never answers."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from tasks.appdata import graph
from tasks.appdata.objects import AppObject
from tasks.appdata.store import AppData
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, row_key
from tasks.feeds.writes import WriteBody, apply_write
from tasks.hbase import ClusterPair, read_columns

_clock = itertools.count(1_700_000_000_000, 1000)


def tick() -> int:
    """A fresh, increasing action time (ms), one second after the last."""
    return next(_clock)


def apply_all(pair: ClusterPair, bodies: Iterable[WriteBody], *, via_json: bool = True) -> None:
    """What the write jobs would do: each body (through its JSON, as a job
    carries it) on its own cluster."""
    for body in bodies:
        apply_write(pair, WriteBody.from_json(body.to_json()) if via_json else body)


def feed(pair: ClusterPair, cluster: str, user: int) -> list[int]:
    """Every pin id in ``user``'s row on ``cluster``, in column order."""
    columns = read_columns(pair[cluster], TABLE, row_key(user), family=FAMILY, limit=10_000)
    return [parse_qualifier(q).pin_id for q, _ in columns]


def feeds(pair: ClusterPair, user: int) -> list[int]:
    """The feed, checked to be the same on both clusters."""
    primary, standby = feed(pair, "primary", user), feed(pair, "standby", user)
    assert primary == standby, f"clusters differ for {user}: {primary} vs {standby}"
    return primary


def user(store: AppData, name: str) -> int:
    return graph.create_user(store, {"name": name}).id


def pin(store: AppData, pinner: int, board: int, at_ms: int) -> AppObject:
    return graph.create_pin(store, pinner, board, {"title": f"pin at {at_ms}"}, created_at_ms=at_ms)


