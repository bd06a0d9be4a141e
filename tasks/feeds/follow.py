"""Follow and unfollow: the writes that bring a followee's recent pins into
a follower's feed, or take them out.

Timestamps are the action's time (seed 002, VI.D): a follow at t1 puts at
t1, an unfollow at t2 deletes at t2, which masks every version <= t2 of
those columns whatever order the jobs run in; a re-follow at t3 > t2 puts
at t3 and shows again.

A feed pin can be there for two reasons: its pinner is followed, or its
board is. An unfollow only deletes the pins that lose their last reason:

- unfollowing a board keeps the pins whose pinner the follower still
  follows as a user (``graph.follows_user``);
- unfollowing a user keeps the pins on boards the follower still follows
  (``graph.follows_board``; both checks run as one
  ``mappings.existing`` query per action): the "follows of a user's boards" case. The
  app data has no "follow a user = follow all their boards" rule (a user
  follow is its own edge, and fan-out reaches followers of the pinner and
  of the board), so nothing else is needed for a user's boards.

The checks read the graph when the job runs, so they should run after the
graph write of the action itself (the task does that first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tasks.appdata import graph, mappings
from tasks.appdata.ids import ObjectType, expect_type, split_id
from tasks.appdata.mappings import MAX_PAGE
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWS_BOARD, USER_FOLLOWS_USER
from tasks.feeds import bodies
from tasks.feeds.cells import qualifier
from tasks.feeds.writes import WriteBody, make_bodies

Action = Literal["follow", "unfollow"]
DEFAULT_RECENT_PINS = 200


class InvalidFollowAction(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class FollowAction:
    follower_id: int
    followee_id: int  # a user or a board
    action: Action
    at_ms: int  # the action's time: the cells' timestamp

    def __post_init__(self) -> None:
        try:
            expect_type(self.follower_id, ObjectType.USER)
            kind = split_id(self.followee_id).type
        except ValueError as exc:
            raise InvalidFollowAction(f"follow action: {exc}") from None
        if kind not in (ObjectType.USER, ObjectType.BOARD):
            raise InvalidFollowAction(f"follow action: followee {self.followee_id} is a {kind.name.lower()}")
        if self.follower_id == self.followee_id:
            raise InvalidFollowAction(f"follow action: {self.follower_id} cannot follow itself")
        if self.action not in ("follow", "unfollow"):
            raise InvalidFollowAction(f"follow action: action must be follow or unfollow, got {self.action!r}")
        if type(self.at_ms) is not int or self.at_ms <= 0:
            raise InvalidFollowAction(f"follow action: at_ms must be a positive int, got {self.at_ms!r}")

    @property
    def of_board(self) -> bool:
        return split_id(self.followee_id).type is ObjectType.BOARD

    def to_json(self) -> str:
        fields: dict[str, Any] = {
            "follower_id": self.follower_id,
            "followee_id": self.followee_id,
            "action": self.action,
            "at_ms": self.at_ms,
        }
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> FollowAction:
        required = ("follower_id", "followee_id", "action", "at_ms")
        return cls(**bodies.load(text, "follow action", required, (), InvalidFollowAction))


def follow_writes(store: AppData, action: FollowAction, *, recent: int = DEFAULT_RECENT_PINS) -> list[WriteBody]:
    """The put (follow) or delete (unfollow) of the followee's ``recent``
    newest pins, one body per cluster; none if nothing is to change."""
    if type(recent) is not int or not 1 <= recent <= MAX_PAGE:
        raise ValueError(f"recent must be an int in 1..{MAX_PAGE}, got {recent!r}")
    if action.of_board:
        edges = graph.recent_pins_of_board(store, action.followee_id, recent)
    else:
        edges = graph.recent_pins_of_user(store, action.followee_id, recent)
    pins = [(edge.to_id, edge.sequence) for edge in edges]  # (pin id, created_at)
    if action.action == "unfollow" and pins:
        still = _still_reachable(store, action, [pin for pin, _ in pins])
        pins = [(pin, created) for pin, created in pins if pin not in still]
    return make_bodies(
        "put" if action.action == "follow" else "delete",
        [action.follower_id],
        [qualifier(created, pin) for pin, created in pins],
        action.at_ms,
    )


def _still_reachable(store: AppData, action: FollowAction, pin_ids: list[int]) -> set[int]:
    """The pins the follower still gets through the other kind of follow."""
    other = "user_id" if action.of_board else "board_id"
    owner_of = {pin.id: int(pin.data[other]) for pin in graph.get_pins(store, pin_ids) if other in pin.data}
    # graph.follows_user / follows_board for every owner, in one query.
    table = USER_FOLLOWS_USER if action.of_board else USER_FOLLOWS_BOARD
    followed = mappings.existing(store, table, action.follower_id, set(owner_of.values()))
    return {pin for pin, owner in owner_of.items() if owner in followed}
