"""Helpers of the feed tests: apply write bodies as the write jobs would,
read a feed row back (with its versions), make users and pins, hand out action times, make a
fanned-out feed, find every row holding a cell, a port that never answers, and the feed
table trimmed by compaction or by jobs for a while."""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from tasks.appdata import graph
from tasks.appdata.objects import AppObject
from tasks.appdata.store import AppData
from tasks.feeds.cells import FAMILY, TABLE, parse_qualifier, parse_row_key, row_key
from tasks.feeds.fanout import FanoutJob, fanout_page
from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.feeds.writes import WriteBody, apply_write
from tasks.hbase import ClusterPair, get_versions, read_columns
from tasks.hbase.settings import Address
from tasks.hbase.tables import apply_table, detach_coprocessor, ensure_table

_clock = itertools.count(1_700_000_000_000, 1000)


def tick() -> int:
    """A fresh, increasing action time (ms), one second after the last."""
    return next(_clock)


def apply_all(pair: ClusterPair, store: AppData, bodies: Iterable[WriteBody], *, via_json: bool = True) -> None:
    """What the write jobs would do: each body (through its JSON, as a job
    carries it) on its own cluster."""
    for body in bodies:
        apply_write(pair, store, WriteBody.from_json(body.to_json()) if via_json else body)


def feed(pair: ClusterPair, cluster: str, user: int) -> list[int]:
    """Every pin id in ``user``'s row on ``cluster``, in column order."""
    columns = read_columns(pair[cluster], TABLE, row_key(user), family=FAMILY, limit=10_000)
    return [parse_qualifier(q).pin_id for q, _ in columns]


def feed_versions(pair: ClusterPair, user: int) -> dict[int, set[int]]:
    """Every pin of ``user``'s row with the versions it has (the follows it
    is there for), checked to be the same on both clusters."""
    row = row_key(user)
    found = []
    for pool in pair:
        cells = get_versions(pool, TABLE, [row], columns=[FAMILY.encode()]).get(row, {})
        found.append({parse_qualifier(c.split(b":", 1)[1]).pin_id: {ts for ts, _v in versions}
                      for c, versions in cells.items()})
    assert found[0] == found[1], f"clusters differ for {user}: {found[0]} vs {found[1]}"
    return found[0]


def feeds(pair: ClusterPair, user: int) -> list[int]:
    """The feed, checked to be the same on both clusters."""
    primary, standby = feed(pair, "primary", user), feed(pair, "standby", user)
    assert primary == standby, f"clusters differ for {user}: {primary} vs {standby}"
    return primary


def user(store: AppData, name: str) -> int:
    return graph.create_user(store, {"name": name}).id


@contextlib.contextmanager
def trimming(pair: ClusterPair, cap: int, *, by_compaction: tuple[str, ...] = ()) -> Iterator[None]:
    """The feed table with ``cap`` as its compaction-time cap, the trimming
    coprocessor attached only on the clusters named (the others trim with
    jobs), and as defined again afterwards (later tests share the table)."""
    try:
        for pool in pair:
            ensure_table(pool, feed_table(cap))
            apply_table(pool, feed_table(cap))
            if pool.name not in by_compaction:
                assert detach_coprocessor(pool, feed_table(cap))
        yield
    finally:
        for pool in pair:
            apply_table(pool, FOLLOWING_FEED)


def followed_pinner(store: AppData, readers: int) -> tuple[int, int, list[int]]:
    """A pinner with a board and ``readers`` new users following it."""
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    followers = [user(store, f"reader{i}") for i in range(readers)]
    for reader in followers:
        graph.follow_user(store, reader, pinner)
    return pinner, board, followers


def pin(store: AppData, pinner: int, board: int, at_ms: int) -> AppObject:
    return graph.create_pin(store, pinner, board, {"title": f"pin at {at_ms}"}, created_at_ms=at_ms)


def feed_of(store: AppData, pair: ClusterPair, count: int) -> tuple[int, list[int]]:
    """A follower whose feed has ``count`` pins, fanned out to both clusters: the user and the pin ids, newest first."""
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    follower = user(store, "reader")
    graph.follow_user(store, follower, pinner, at_ms=tick())
    pins = []
    for _ in range(count):
        created = tick()
        p = pin(store, pinner, board, created)
        pins.append(p.id)
        job: FanoutJob | None = FanoutJob(p.id, pinner, board, created)
        while job is not None:
            step = fanout_page(store, job)
            apply_all(pair, store, step.writes)
            job = step.next_job
    return follower, pins[::-1]


@contextlib.contextmanager
def silent_port() -> Iterator[Address]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield Address("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


def rows_with_column(pair: ClusterPair, cluster: str, qualifier: bytes) -> Counter[int]:
    """Every user whose row on ``cluster`` has ``qualifier``, with how many
    cells of it the row holds: one scan of the whole table, filtered on the
    region server, so checking a 100,000-follower fan-out reads only its cells."""
    scan_filter = b"QualifierFilter(=, 'binary:" + qualifier + b"') AND KeyOnlyFilter()"

    def work(connection: Any) -> Counter[int]:
        found: Counter[int] = Counter()
        for key, data in connection.table(TABLE).scan(filter=scan_filter, batch_size=5000):
            found[parse_row_key(key)] += len(data)
        return found

    return pair[cluster].run(f"scan {TABLE} for {qualifier!r}", work)


def all_followers(store: AppData, account: int, kind: str = "user") -> list[int]:
    """Every follower of a user (``kind`` "user") or a board, from MySQL."""
    walk = graph.followers_of_user if kind == "user" else graph.followers_of_board
    out: list[int] = []
    cursor = None
    while True:
        page = walk(store, account, limit=10_000, cursor=cursor)
        out.extend(page.ids)
        if page.next is None:
            return out
        cursor = page.next
