"""64-bit ids: round trips and refusals (no server needed)."""

from __future__ import annotations

import random

import pytest

from tasks.appdata.ids import (
    MAX_LOCAL,
    MAX_SHARD,
    InvalidId,
    ObjectType,
    expect_type,
    make_id,
    shard_of,
    split_id,
)


def test_type_numbers_are_fixed_forever() -> None:
    assert {t.name: t.value for t in ObjectType} == {"USER": 1, "BOARD": 2, "PIN": 3}


def test_round_trip_at_the_edges_and_at_random() -> None:
    rng = random.Random(0)
    cases = [(0, ObjectType.USER, 1), (MAX_SHARD, ObjectType.PIN, MAX_LOCAL), (42, ObjectType.BOARD, 7)]
    cases += [(rng.randrange(MAX_SHARD + 1), rng.choice(list(ObjectType)), rng.randrange(1, MAX_LOCAL + 1))
              for _ in range(1000)]
    for shard, kind, local in cases:
        object_id = make_id(shard, kind, local)
        assert 0 < object_id < 1 << 62
        assert split_id(object_id) == (shard, kind, local)
        assert make_id(shard, int(kind), local) == object_id


def test_the_seed_example_decomposes_as_in_the_post() -> None:
    # Pin 241294492511762325 of Pinterest's sharding post: shard 3429, type 1, local 7075733.
    assert split_id(241294492511762325) == (3429, ObjectType(1), 7075733)
    assert make_id(3429, 1, 7075733) == 241294492511762325


@pytest.mark.parametrize(
    ("shard", "kind", "local"),
    [
        (-1, 1, 1),
        (MAX_SHARD + 1, 1, 1),
        (0, 1, 0),
        (0, 1, MAX_LOCAL + 1),
        (0, 0, 1),
        (0, 4, 1),
        (0, 1024, 1),
        (True, 1, 1),
        (0, 1, 1.0),
        ("1", 1, 1),
    ],
)
def test_make_id_refuses(shard: object, kind: object, local: object) -> None:
    with pytest.raises(InvalidId):
        make_id(shard, kind, local)  # type: ignore[arg-type]


def test_split_id_refuses_reserved_bits_range_and_unknown_types() -> None:
    good = make_id(5, ObjectType.PIN, 9)
    for bad in (good | 1 << 62, good | 1 << 63, 1 << 64, -good, 0):
        with pytest.raises(InvalidId):
            split_id(bad)
    with pytest.raises(InvalidId, match="unknown object type 9"):
        split_id((5 << 46) | (9 << 36) | 1)
    with pytest.raises(InvalidId, match="local id 0"):
        split_id((5 << 46) | (1 << 36))
    with pytest.raises(InvalidId):
        split_id(float(good))  # type: ignore[arg-type]


def test_expect_type_names_both_types() -> None:
    board = make_id(1, ObjectType.BOARD, 1)
    assert expect_type(board, ObjectType.BOARD).local == 1
    with pytest.raises(InvalidId, match="is a board, not a user"):
        expect_type(board, ObjectType.USER)


def test_shard_of_agrees_with_expect_type_on_good_ids_and_refuses_the_same_ones() -> None:
    rng = random.Random(1)
    good = [make_id(0, ObjectType.USER, 1), make_id(MAX_SHARD, ObjectType.PIN, MAX_LOCAL)]
    good += [make_id(rng.randrange(MAX_SHARD + 1), rng.choice(list(ObjectType)), rng.randrange(1, MAX_LOCAL + 1))
             for _ in range(1000)]
    for object_id in good:
        kind = split_id(object_id).type
        assert shard_of(object_id, kind) == expect_type(object_id, kind).shard
        for other in ObjectType:
            if other is not kind:
                with pytest.raises(InvalidId, match="not a"):
                    shard_of(object_id, other)
    user = make_id(3, ObjectType.USER, 9)
    for bad in (-1, 0, 1 << 62, 1 << 64, True, 1.0, str(user), user - 9, (1 << 62) | user):
        with pytest.raises(InvalidId):
            shard_of(bad, ObjectType.USER)  # type: ignore[arg-type]
