"""The feed's row keys and columns.

One row per user; one column per pin, qualifier = reverse creation time +
pin id, both zero-padded decimal of fixed width, so HBase's lexicographic
column order is newest first (ties on the same millisecond: higher pin id
first, pin ids being reversed too). Values are empty. The same pin always
gets the same column, so writing it twice, through the pinner and the board
or by a retried job, leaves one cell.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tasks.feeds.tables import FOLLOWING_FEED

TABLE = FOLLOWING_FEED.name
FAMILY = FOLLOWING_FEED.families[0].name

# created_at is epoch ms: 13 digits until the year 2286. Ids are < 2**62,
# so 19 digits.
TIME_DIGITS = 13
ID_DIGITS = 19
MAX_TIME = 10**TIME_DIGITS - 1
MAX_ID = 10**ID_DIGITS - 1
QUALIFIER_LENGTH = TIME_DIGITS + ID_DIGITS
_QUALIFIER = re.compile(rb"[0-9]{%d}" % QUALIFIER_LENGTH)
ROW_DIGITS = 19
_ROW = re.compile(rb"[0-9]{%d}" % ROW_DIGITS)


class FeedCell(NamedTuple):
    created_at_ms: int
    pin_id: int


def qualifier(created_at_ms: int, pin_id: int) -> bytes:
    """The column qualifier (without the family) of a pin."""
    if type(created_at_ms) is not int or not 0 <= created_at_ms <= MAX_TIME:
        raise ValueError(f"created_at must be an int of ms in 0..{MAX_TIME}, got {created_at_ms!r}")
    if type(pin_id) is not int or not 0 < pin_id <= MAX_ID:
        raise ValueError(f"pin id must be an int in 1..{MAX_ID}, got {pin_id!r}")
    return b"%0*d%0*d" % (TIME_DIGITS, MAX_TIME - created_at_ms, ID_DIGITS, MAX_ID - pin_id)


def parse_qualifier(value: bytes) -> FeedCell:
    """``(created_at_ms, pin_id)`` back from a qualifier; ValueError if it is not one."""
    if not isinstance(value, bytes) or not _QUALIFIER.fullmatch(value):
        raise ValueError(f"not a feed qualifier: {value!r}")
    pin_id = MAX_ID - int(value[TIME_DIGITS:])
    if pin_id <= 0:
        raise ValueError(f"not a feed qualifier (pin id 0): {value!r}")
    return FeedCell(MAX_TIME - int(value[:TIME_DIGITS]), pin_id)


ROW_LIMIT = 10**ROW_DIGITS  # above every user id a row key can hold


def column(created_at_ms: int, pin_id: int) -> bytes:
    """``b"feed:<qualifier>"``, as the write functions take it."""
    return FAMILY.encode() + b":" + qualifier(created_at_ms, pin_id)


def check_user(user_id: int) -> int:
    """A user id that has a feed row (the check of ``row_key``, without
    making the key: bodies check every row they carry)."""
    if type(user_id) is not int or not 0 < user_id < ROW_LIMIT:
        raise ValueError(f"user id must be a positive int below 10**{ROW_DIGITS}, got {user_id!r}")
    return user_id


def row_key(user_id: int) -> bytes:
    """A user's feed row: the id in fixed-width decimal (so row order is id
    order, and a sweep cursor is printable)."""
    return b"%0*d" % (ROW_DIGITS, check_user(user_id))


def parse_row_key(key: bytes) -> int:
    if not isinstance(key, bytes) or not _ROW.fullmatch(key) or int(key) == 0:
        raise ValueError(f"not a feed row key: {key!r}")
    return int(key)
