"""The rules of per-key allowances over fair service, as the memory shard
states them (``pinlater.stores.memory.lanes``): a key with nothing left
loses its turn, a key with no allowance yet ends the call, lane "" is
never limited."""

from __future__ import annotations

from pinlater.stores.memory.lanes import Lanes

NOW = 1_000


def lanes_with(jobs: list[tuple[str, int]]) -> tuple[Lanes, dict[int, int]]:
    """Lanes holding ``jobs`` (key, id), all due; and the jobs without a key
    (id -> run_after) for ``plain_head``."""
    lanes, plain = Lanes(), {}
    for key, local_id in jobs:
        if key:
            lanes.add(key, local_id, NOW - 10, NOW)
        else:
            plain[local_id] = NOW - 10
    return lanes, plain


def take(lanes: Lanes, plain: dict[int, int], want: int, allow: dict[str, int] | None) -> tuple[list[int], str | None]:
    claimed: list[int] = []

    def plain_head() -> tuple[int, int] | None:
        return min(((ra, i) for i, ra in plain.items()), default=None)

    def claim(local_id: int) -> None:
        plain.pop(local_id, None)
        claimed.append(local_id)

    short = lanes.take(want, NOW, plain_head, claim, allow)
    return claimed, short


def test_a_key_out_of_allowance_loses_its_turn_and_others_go_on() -> None:
    lanes, plain = lanes_with([("a", 1), ("a", 2), ("a", 3), ("b", 4), ("b", 5), ("c", 6)])
    allow = {"a": 1, "b": 2, "c": 5}
    claimed, short = take(lanes, plain, 10, allow)
    # b and c left when found empty; a lost its turn, then ended the call.
    assert (claimed, short) == ([1, 4, 6, 5], "a")
    assert allow == {"a": 0, "b": 0, "c": 4}
    # a's jobs wait for an allowance; with one, a is served again.
    claimed, short = take(lanes, plain, 10, {"a": 1})
    assert (claimed, short) == ([2], "a")


def test_a_key_without_an_allowance_ends_the_call_keeping_its_turn() -> None:
    lanes, plain = lanes_with([("a", 1), ("b", 2), ("c", 3)])
    assert lanes.in_turn(2, NOW) == ["a", "b"]
    claimed, short = take(lanes, plain, 3, {"a": 1, "b": 1})
    assert (claimed, short) == ([1, 2], "c")
    # a and b were served and went last, empty (they leave when their turn
    # comes): no allowance is asked for them.
    assert lanes.in_turn(3, NOW) == ["c"]
    claimed, short = take(lanes, plain, 3, {"c": 1})
    assert (claimed, short) == ([3], None)


def test_jobs_without_a_key_are_never_limited() -> None:
    lanes, plain = lanes_with([("a", 1), ("a", 2), ("", 3), ("", 4)])
    claimed, short = take(lanes, plain, 4, {"a": 0})
    assert (sorted(claimed), short) == ([3, 4], "a")


def test_without_allowances_service_is_as_before() -> None:
    lanes, plain = lanes_with([("a", 1), ("a", 2), ("b", 3)])
    assert take(lanes, plain, 3, None) == ([1, 3, 2], None)
