"""The fixed catalogue of tables in every shard database: one object table
per object type and the one-directional mapping tables. A mapping lives on
the shard of its ``from`` id; a reverse direction is its own table.

| mapping | from -> to | sequence | read by |
|---|---|---|---|
| user_follows_user | follower -> followee | follow time ms | "does U follow P?", a user's followees |
| user_followed_by_user | followee -> follower | follow time ms | fan-out: a pinner's followers, paged |
| user_follows_board | follower -> board | follow time ms | "does U follow B?" |
| board_followed_by_user | board -> follower | follow time ms | fan-out: a board's followers, paged |
| user_has_boards | owner -> board | board created_at ms | a user's boards |
| user_has_pins | pinner -> pin | pin created_at ms | follow a user: their N newest pins |
| board_has_pins | board -> pin | pin created_at ms | follow a board: its N newest pins |

A pin's board and pinner, and a board's owner, are fields of the object's
JSON (``board_id``, ``user_id``): the reverse lookups need no tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.appdata.ids import ObjectType

OBJECT_TABLES: dict[ObjectType, str] = {
    ObjectType.USER: "users",
    ObjectType.BOARD: "boards",
    ObjectType.PIN: "pins",
}


@dataclass(frozen=True, slots=True)
class MappingTable:
    name: str
    from_type: ObjectType
    to_type: ObjectType


USER_FOLLOWS_USER = MappingTable("user_follows_user", ObjectType.USER, ObjectType.USER)
USER_FOLLOWED_BY_USER = MappingTable("user_followed_by_user", ObjectType.USER, ObjectType.USER)
USER_FOLLOWS_BOARD = MappingTable("user_follows_board", ObjectType.USER, ObjectType.BOARD)
BOARD_FOLLOWED_BY_USER = MappingTable("board_followed_by_user", ObjectType.BOARD, ObjectType.USER)
USER_HAS_BOARDS = MappingTable("user_has_boards", ObjectType.USER, ObjectType.BOARD)
USER_HAS_PINS = MappingTable("user_has_pins", ObjectType.USER, ObjectType.PIN)
BOARD_HAS_PINS = MappingTable("board_has_pins", ObjectType.BOARD, ObjectType.PIN)

MAPPING_TABLES: tuple[MappingTable, ...] = (
    USER_FOLLOWS_USER,
    USER_FOLLOWED_BY_USER,
    USER_FOLLOWS_BOARD,
    BOARD_FOLLOWED_BY_USER,
    USER_HAS_BOARDS,
    USER_HAS_PINS,
    BOARD_HAS_PINS,
)

# Forward table -> its reverse, written alongside it (see tasks.appdata.graph).
REVERSE: dict[MappingTable, MappingTable] = {
    USER_FOLLOWS_USER: USER_FOLLOWED_BY_USER,
    USER_FOLLOWS_BOARD: BOARD_FOLLOWED_BY_USER,
}

# Imported contacts per (user, source), on the user's shard; external
# accounts -> user ids, and accounts -> the imports naming them, on the
# shard an account's name hashes to (tasks.appdata.contacts).
CONTACT_SOURCES = "contact_sources"
EXTERNAL_ACCOUNTS = "external_accounts"
ACCOUNT_IMPORTERS = "account_importers"
CONTACT_TABLES = (CONTACT_SOURCES, EXTERNAL_ACCOUNTS, ACCOUNT_IMPORTERS)

# Each user's clock: the time of their last follow, unfollow or rename, on
# the user's shard (tasks.appdata.graph).
FOLLOW_CLOCKS = "follow_clocks"

TABLE_NAMES = (
    frozenset(OBJECT_TABLES.values()) | frozenset(m.name for m in MAPPING_TABLES) | frozenset(CONTACT_TABLES)
    | {FOLLOW_CLOCKS}
)
