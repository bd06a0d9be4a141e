"""The social graph on top of objects and mappings: users, boards, pins and
follows, with the shard rules and the reverse mappings.

Where new objects go:
- a user: a random mapped shard (``shard=`` to choose one);
- a board: its owner's shard;
- a pin: its board's shard (as Pinterest's sharding does), so a board's pins and
  the board_has_pins rows sit together.

Reverse mappings (a follow is user_follows_X on the follower's shard and
X_followed_by_user on the followee's shard) are two writes to two shards,
with no transaction across them. The order keeps one invariant at every
moment: **the reverse rows are a subset of the forward rows.**
- follow: forward first, then reverse;
- unfollow: reverse first, then forward.
So a failure between the two writes leaves a follow that fan-out does not
see yet (a missed pin), never a non-follower who gets pins. Both writes are
idempotent (an existing pair keeps its sequence; removing a missing one is
a no-op), so the remedy is to run the whole call again: the follow/unfollow
tasks call these functions inside a PinLater job, and a failure raises out
of the task, and PinLater retries the job until both writes are done.
``repair_reverse`` re-adds missing reverse rows of one user from the forward
table (a backfill/verify job can walk users with it).

A follow's time (the sequence of both rows) comes from the follower's
clock (``follow_clock``: a row per user in ``follow_clocks``): the time of
the action, or just past the user's previous action when that was not
earlier. So one user's follows never share a time, not even with follows
since removed, and a later follow has a later time: the feeds version a
follow's cells with it, and an unfollow masks exactly that version. A pin
is made past the newest follow of its pinner and of its board: a follow
brings the pins made up to its time (the newest few) and every one made
after, so a pin made just after a follow must not share its millisecond.

The typeahead versions an entry with the newest time of the records it
comes from: follows both ways between two users and the contact's
``name_at`` (``tasks.typeahead.truth``). So a change must be later than
every record it joins, also those of the other user and in the same
millisecond, or an entry would change and keep its version. A follow or
unfollow of a user is also past the followee's clock (``edge_clock``); an
unfollow past both users' names too (``unfollow_clock``: a name never
changed dates from the user's creation, which no clock saw); and
a rename past the user's clock and their newest follower's follow
(``rename_user``), which then moves the user's clock to it. Actions made
one after another are then ordered, whoever's clock each one ticks.

The forward table is the truth for "does U follow P / B"
(``follows_user``, ``follows_board``); the reverse tables feed fan-out.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.appdata import mappings, objects
from tasks.appdata.ids import InvalidId, ObjectType, expect_type, split_id
from tasks.appdata.mappings import Cursor, Edge, Page
from tasks.appdata.objects import AppObject
from tasks.appdata.sql import sql
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import (
    BOARD_FOLLOWED_BY_USER,
    BOARD_HAS_PINS,
    FOLLOW_CLOCKS,
    REVERSE,
    USER_FOLLOWED_BY_USER,
    USER_FOLLOWS_BOARD,
    USER_FOLLOWS_USER,
    USER_HAS_BOARDS,
    USER_HAS_PINS,
    MappingTable,
)

# ---------------------------------------------------------------- objects


NAME_MAX = 200


def check_name(name: object) -> str:
    """A user's name, stripped; ValueError unless 1..NAME_MAX characters of text without NUL."""
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX or "\x00" in name:
        raise ValueError(f"a name is 1..{NAME_MAX} characters of text, without NUL")
    return name.strip()


def create_user(
    store: AppData,
    data: Mapping[str, Any],
    *,
    shard: int | None = None,
    created_at_ms: int | None = None,
    rng: random.Random | None = None,
) -> AppObject:
    if "name" in data:
        # Every index entry naming the user copies it, and every lookup
        # that finds one answers it: bounded as a rename bounds it.
        check_name(data["name"])
    if shard is None:
        shard = (rng or random).choice(store.shard_map.shards)
    return objects.create(store, ObjectType.USER, shard, data, created_at_ms=created_at_ms)


def create_board(
    store: AppData, owner_id: int, data: Mapping[str, Any], *, created_at_ms: int | None = None
) -> AppObject:
    """A board on its owner's shard; ``user_id`` is set in its data."""
    shard = expect_type(owner_id, ObjectType.USER).shard
    board = objects.create(store, ObjectType.BOARD, shard, {**data, "user_id": owner_id}, created_at_ms=created_at_ms)
    mappings.add(store, USER_HAS_BOARDS, owner_id, board.id, board.created_at_ms)
    return board


def create_pin(
    store: AppData, pinner_id: int, board_id: int, data: Mapping[str, Any], *, created_at_ms: int | None = None
) -> AppObject:
    """A pin on its board's shard; ``user_id`` and ``board_id`` are set in
    its data; board_has_pins and user_has_pins get sequence = created_at,
    the time asked (now by default) or just past the newest follow of the
    pinner or the board when that was not earlier.
    The object is written first: if a mapping write fails, the pin exists
    but nothing points at it (invisible, harmless); a retry makes another."""
    expect_type(pinner_id, ObjectType.USER)
    shard = expect_type(board_id, ObjectType.BOARD).shard
    created = now_ms() if created_at_ms is None else created_at_ms
    # Past the newest follow of its pinner and of its board: a follow at t
    # brings the newest pins created up to t and every pin created after, so
    # a pin made after a follow in the same millisecond would count as made
    # before it, and could push an earlier pin out of the follower's feed.
    for table, followee in ((USER_FOLLOWED_BY_USER, pinner_id), (BOARD_FOLLOWED_BY_USER, board_id)):
        newest = mappings.recent(store, table, followee, 1)
        if newest:
            created = max(created, newest[0].sequence + 1)
    pin = objects.create(
        store, ObjectType.PIN, shard, {**data, "user_id": pinner_id, "board_id": board_id}, created_at_ms=created
    )
    mappings.add(store, BOARD_HAS_PINS, board_id, pin.id, pin.created_at_ms)
    mappings.add(store, USER_HAS_PINS, pinner_id, pin.id, pin.created_at_ms)
    return pin


def get_pins(store: AppData, pin_ids: Sequence[int]) -> list[AppObject]:
    """Feed reads: pins by id across shards, in the order given, unknown ids left out."""
    return objects.get_many(store, pin_ids, ObjectType.PIN)


# ---------------------------------------------------------------- follows


def follow_clock(store: AppData, user_id: int, at_ms: int | None = None) -> int:
    """A time for an action of ``user_id``: ``at_ms`` (now by default), or
    just past the user's last one when that is not earlier. Every call
    answers a later time than the one before for this user, in any process."""
    expect_type(user_id, ObjectType.USER)
    asked = now_ms() if at_ms is None else at_ms
    shard = split_id(user_id).shard
    stmt = sql("tick_follow_clock", database=store.locate(shard).database, table=FOLLOW_CLOCKS)

    def tick(cursor: Any, _database: str) -> int:
        inserted = cursor.execute(stmt, (user_id, asked)) == 1
        return asked if inserted else int(cursor.lastrowid)

    return store.run(shard, tick)


def clock_of(store: AppData, user_id: int) -> int:
    """The last time ``user_id``'s clock handed out (0: none yet)."""
    shard = expect_type(user_id, ObjectType.USER).shard
    stmt = sql("follow_clock_of", database=store.locate(shard).database, table=FOLLOW_CLOCKS)
    rows = store.run(shard, mappings.fetcher(stmt, (user_id,)))
    return int(rows[0][0]) if rows else 0


def edge_clock(store: AppData, follower_id: int, followee_id: int, at_ms: int | None = None) -> int:
    """A time for a follow or unfollow of the user or board ``followee_id``
    by ``follower_id``: from the follower's clock, and for a user also past
    the followee's (their follows and renames), so that it is later than
    every record of the two users the index entries it changes come from."""
    asked = now_ms() if at_ms is None else at_ms
    if split_id(followee_id).type is ObjectType.USER:
        asked = max(asked, clock_of(store, followee_id) + 1)
    return follow_clock(store, follower_id, asked)


def unfollow_clock(store: AppData, follower_id: int, followee_id: int, at_ms: int | None = None) -> int:
    """A time for an unfollow: ``edge_clock``'s, and for a user also past
    both users' names. The entries it removes are versioned with them too,
    and a name never changed dates from its user's creation, which no clock
    saw: a process whose clock runs behind the one that made the users
    would otherwise remove as of a time before the entries' versions, and
    leave them."""
    asked = now_ms() if at_ms is None else at_ms
    if split_id(followee_id).type is ObjectType.USER:
        for user in objects.get_many(store, [follower_id, followee_id], ObjectType.USER):
            asked = max(asked, name_of(user)[1] + 1)
    return edge_clock(store, follower_id, followee_id, asked)


def _link(store: AppData, forward: MappingTable, from_id: int, to_id: int, at_ms: int | None) -> bool:
    if from_id == to_id:
        raise InvalidId(f"{from_id} cannot follow itself")
    sequence = mappings.sequences(store, forward, from_id, [to_id]).get(to_id)
    added = False
    if sequence is None:
        # A new follow's time comes from the follower's clock: unique among
        # all their follows, ever, and after every earlier one.
        sequence = edge_clock(store, from_id, to_id, at_ms)
        added = mappings.add(store, forward, from_id, to_id, sequence)
        if not added:  # another process made it meanwhile: its time stands
            sequence = mappings.sequences(store, forward, from_id, [to_id]).get(to_id, sequence)
    # Also when the forward row was there: a retry completes a half-done
    # follow, with the forward row's own time.
    mappings.add(store, REVERSE[forward], to_id, from_id, sequence)
    return added


def _unlink(store: AppData, forward: MappingTable, from_id: int, to_id: int) -> bool:
    mappings.remove(store, REVERSE[forward], to_id, from_id)
    return mappings.remove(store, forward, from_id, to_id)


def follow_user(store: AppData, follower_id: int, followee_id: int, *, at_ms: int | None = None) -> bool:
    """True if this is a new follow. ``at_ms`` (the action's time) is the sequence."""
    return _link(store, USER_FOLLOWS_USER, follower_id, followee_id, at_ms)


def unfollow_user(store: AppData, follower_id: int, followee_id: int) -> bool:
    return _unlink(store, USER_FOLLOWS_USER, follower_id, followee_id)


def follow_board(store: AppData, follower_id: int, board_id: int, *, at_ms: int | None = None) -> bool:
    return _link(store, USER_FOLLOWS_BOARD, follower_id, board_id, at_ms)


def unfollow_board(store: AppData, follower_id: int, board_id: int) -> bool:
    return _unlink(store, USER_FOLLOWS_BOARD, follower_id, board_id)


def follow_time(store: AppData, follower_id: int, followee_id: int) -> int | None:
    """When ``follower_id`` followed the user or board ``followee_id`` (the
    forward row's sequence), or None if they do not follow it."""
    forward = USER_FOLLOWS_BOARD if split_id(followee_id).type is ObjectType.BOARD else USER_FOLLOWS_USER
    return mappings.sequences(store, forward, follower_id, [followee_id]).get(followee_id)


def follows_user(store: AppData, user_id: int, pinner_id: int) -> bool:
    return mappings.exists(store, USER_FOLLOWS_USER, user_id, pinner_id)


def follows_board(store: AppData, user_id: int, board_id: int) -> bool:
    return mappings.exists(store, USER_FOLLOWS_BOARD, user_id, board_id)


def followers_of_user(store: AppData, user_id: int, *, limit: int, cursor: Cursor | str | None = None) -> Page:
    """One page of a pinner's followers (newest follow first); see
    ``tasks.appdata.mappings`` for the cursor's stability."""
    return mappings.page(store, USER_FOLLOWED_BY_USER, user_id, limit=limit, cursor=cursor)


def followers_of_board(store: AppData, board_id: int, *, limit: int, cursor: Cursor | str | None = None) -> Page:
    return mappings.page(store, BOARD_FOLLOWED_BY_USER, board_id, limit=limit, cursor=cursor)


def follower_count(store: AppData, object_id: int) -> int:
    """Followers of a user or a board (an index range count: fine for
    dashboards and tests, not for every page view)."""
    table = BOARD_FOLLOWED_BY_USER if split_id(object_id).type is ObjectType.BOARD else USER_FOLLOWED_BY_USER
    return mappings.count(store, table, object_id)


def recent_pins_of_user(store: AppData, user_id: int, n: int) -> list[Edge]:
    """The pinner's ``n`` newest pins, newest first; each edge's sequence is
    the pin's created_at (what a feed column needs, without the object)."""
    return mappings.recent(store, USER_HAS_PINS, user_id, n)


def recent_pins_of_board(store: AppData, board_id: int, n: int) -> list[Edge]:
    return mappings.recent(store, BOARD_HAS_PINS, board_id, n)


def repair_reverse(store: AppData, forward: MappingTable, from_id: int, *, page_size: int = 1000) -> int:
    """Re-add every reverse row missing for ``from_id``'s forward rows; how
    many were missing."""
    reverse = REVERSE[forward]
    edges = mappings.walk(store, forward, from_id, page_size=page_size)
    rows = [(edge.to_id, from_id, edge.sequence) for edge in edges]
    return mappings.add_many(store, reverse, rows)



# ---------------------------------------------------------------- names


def name_of(user: AppObject) -> tuple[str, int]:
    """A user's display name and its version: the time it was last set
    (``name_at``; the creation time for a name never changed)."""
    return str(user.data.get("name") or user.data.get("username") or ""), int(
        user.data.get("name_at", user.created_at_ms)
    )


def rename_user(store: AppData, user_id: int, name: str, *, at_ms: int | None = None) -> tuple[str, str, int]:
    """Sets a user's name; ``(old name, new name, name_at)``. ``name_at``
    only grows (at least the old one + 1), so it orders renames for the
    index writes stamped with it; and it is past the user's clock and the
    newest follow of the user, so an entry naming the user gets a later
    version than any it had (then the user's clock moves to it)."""
    name = check_name(name)
    asked = max(now_ms() if at_ms is None else at_ms, clock_of(store, user_id) + 1)
    newest = mappings.recent(store, USER_FOLLOWED_BY_USER, user_id, 1)
    if newest:
        asked = max(asked, newest[0].sequence + 1)

    def change(current: AppObject) -> dict[str, Any]:
        return {**current.data, "name": name, "name_at": max(asked, name_of(current)[1] + 1)}

    result = objects.update(store, user_id, ObjectType.USER, change)
    if result is None:
        raise InvalidId(f"no user {user_id}")
    before, after = result
    name_at = name_of(after)[1]
    follow_clock(store, user_id, name_at)  # the user's next action comes after the name
    return name_of(before)[0], name, name_at
