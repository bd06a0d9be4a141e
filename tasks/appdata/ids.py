"""64-bit object ids (as in Pinterest's MySQL sharding): 2 reserved bits (zero), a 16-bit shard, a
10-bit type and a 36-bit local id (the row's auto-increment key in its
shard's object table).

    id = (shard << 46) | (type << 36) | local

The type numbers below are fixed forever: they are inside every id ever
handed out. Add new types with new numbers; never reuse one.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

SHARD_BITS = 16
TYPE_BITS = 10
LOCAL_BITS = 36
RESERVED_BITS = 2

MAX_SHARD = (1 << SHARD_BITS) - 1
MAX_TYPE = (1 << TYPE_BITS) - 1
MAX_LOCAL = (1 << LOCAL_BITS) - 1
TYPE_SHIFT = LOCAL_BITS
SHARD_SHIFT = LOCAL_BITS + TYPE_BITS
# Every valid id is below this: the two reserved top bits are zero.
ID_LIMIT = 1 << (SHARD_SHIFT + SHARD_BITS)


class ObjectType(IntEnum):
    """Object types, by their number inside ids. Fixed forever."""

    USER = 1
    BOARD = 2
    PIN = 3


_TYPES: dict[int, ObjectType] = {t.value: t for t in ObjectType}


class InvalidId(ValueError):
    """Not an id this system could have made: out of range, reserved bits
    set, an unknown type, or the wrong type for the place it was given."""


class IdParts(NamedTuple):
    shard: int
    type: ObjectType
    local: int


def make_id(shard: int, kind: ObjectType | int, local: int) -> int:
    """Compose an id. Local ids start at 1 (auto-increment), so 0 is refused."""
    if not _is_int(shard) or not 0 <= shard <= MAX_SHARD:
        raise InvalidId(f"shard {shard!r} is not in 0..{MAX_SHARD}")
    if not _is_int(local) or not 1 <= local <= MAX_LOCAL:
        raise InvalidId(f"local id {local!r} is not in 1..{MAX_LOCAL}")
    return (shard << SHARD_SHIFT) | (_known_type(kind) << TYPE_SHIFT) | local


def split_id(object_id: int) -> IdParts:
    """The parts of an id; InvalidId for anything ``make_id`` cannot produce."""
    if type(object_id) is not int or not 0 <= object_id < ID_LIMIT:
        if not _is_int(object_id) or object_id < 0:
            raise InvalidId(f"id {object_id!r} is not a non-negative integer")
        raise InvalidId(f"id {object_id} has its reserved top bits set (or is wider than 64 bits)")
    local = object_id & MAX_LOCAL
    kind = _TYPES.get((object_id >> TYPE_SHIFT) & MAX_TYPE)
    if local == 0:
        raise InvalidId(f"id {object_id} has local id 0")
    if kind is None:
        _known_type((object_id >> TYPE_SHIFT) & MAX_TYPE)  # raises, naming the known types
        raise AssertionError("unreachable")
    return IdParts((object_id >> SHARD_SHIFT) & MAX_SHARD, kind, local)


def expect_type(object_id: int, kind: ObjectType) -> IdParts:
    """``split_id``, refusing an id of another type (a board id where a user
    id belongs...)."""
    parts = split_id(object_id)
    if parts.type is not kind:
        raise InvalidId(f"id {object_id} is a {parts.type.name.lower()}, not a {kind.name.lower()}")
    return parts


def shard_of(object_id: int, kind: ObjectType) -> int:
    """``expect_type(object_id, kind).shard`` without building its parts:
    for loops over a page of ids (the errors are ``expect_type``'s)."""
    if (type(object_id) is int and 0 <= object_id < ID_LIMIT and object_id & MAX_LOCAL
            and (object_id >> TYPE_SHIFT) & MAX_TYPE == kind):
        return object_id >> SHARD_SHIFT
    return expect_type(object_id, kind).shard


def _is_int(value: object) -> bool:
    return type(value) is int  # not bool, not float


def _known_type(value: ObjectType | int) -> ObjectType:
    if isinstance(value, ObjectType):
        return value
    if not _is_int(value):
        raise InvalidId(f"type {value!r} is not an integer")
    try:
        return ObjectType(value)
    except ValueError:
        known = ", ".join(f"{t.name}={t.value}" for t in ObjectType)
        raise InvalidId(f"unknown object type {value} (known: {known})") from None
