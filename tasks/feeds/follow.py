"""Follow and unfollow: the writes that bring a followee's pins into a
follower's feed, or take them out.

**What a follow brings** (the invariant every feed job keeps): a user who
follows an account or board F since time t (the follow's time in MySQL)
has in their feed F's ``recent`` newest pins created at or before t, and
every pin of F created after t; each such cell's version is t
(``tasks.feeds.writes``). The follow's job puts the first part and those
of the second that exist when it runs (the newest ``cap``; fan-out brings
the rest); fan-out brings the pins created later.

A follow job reads the follow from MySQL when it runs, not from its body:
when the user has unfollowed since, there is nothing to put (the unfollow's
retraction covers whatever an earlier run put); a follow retried by the
application keeps the time of its first write.

**An unfollow** retracts the version of the follow it undoes, whatever
pins that follow brought and whenever they arrive. The application enqueues
it before it removes the follow from MySQL (``FeedActions.unfollow``), so
the job knows the follow's time even if the application dies in between;
a job that runs while the follow is still there is tried again later
(``FollowStillThere``), and if the removal never comes, the follow stands
and so do its pins. A pin that the user also gets through another follow
keeps that follow's cell: nothing needs to read who else reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tasks import bodies
from tasks.appdata import graph, mappings
from tasks.appdata.ids import ObjectType, expect_type, split_id
from tasks.appdata.mappings import MAX_PAGE
from tasks.appdata.store import AppData
from tasks.appdata.tables import BOARD_HAS_PINS, USER_HAS_PINS
from tasks.errors import TryLater
from tasks.feeds.cells import qualifier
from tasks.feeds.writes import WriteBody, make_bodies

Action = Literal["follow", "unfollow"]
DEFAULT_RECENT_PINS = 200


class InvalidFollowAction(ValueError):
    pass


class FollowStillThere(TryLater):
    """An unfollow's job ran before the application removed the follow."""


@dataclass(frozen=True, slots=True)
class FollowAction:
    follower_id: int
    followee_id: int  # a user or a board
    action: Action
    at_ms: int  # the action's time
    follow_at: int | None = None  # an unfollow: the time of the follow it undoes (its cells' version)

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
        for name in ("at_ms", "follow_at"):
            value = getattr(self, name)
            if (value is not None or name == "at_ms") and (type(value) is not int or value <= 0):
                raise InvalidFollowAction(f"follow action: {name} must be a positive int, got {value!r}")
        if (self.action == "unfollow") != (self.follow_at is not None):
            raise InvalidFollowAction("follow action: an unfollow, and only an unfollow, names follow_at "
                                      "(the time of the follow it undoes)")

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
        if self.follow_at is not None:
            fields["follow_at"] = self.follow_at
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> FollowAction:
        required = ("follower_id", "followee_id", "action", "at_ms")
        return cls(**bodies.load(text, "follow action", required, ("follow_at",), InvalidFollowAction))


def window(store: AppData, followee: int, since: int, *, recent: int, cap: int) -> list[bytes]:
    """The qualifiers of the pins a follow of ``followee`` at ``since``
    brings, as MySQL has them now: the ``recent`` newest created at or
    before ``since``, and the ``cap`` newest created after it."""
    table = BOARD_HAS_PINS if split_id(followee).type is ObjectType.BOARD else USER_HAS_PINS
    before = mappings.up_to(store, table, followee, since, recent)
    after = [e for e in mappings.recent(store, table, followee, min(cap, MAX_PAGE)) if e.sequence > since]
    return [qualifier(e.sequence, e.to_id) for e in after + before]


def follow_writes(store: AppData, action: FollowAction, *, recent: int = DEFAULT_RECENT_PINS,
                  cap: int = MAX_PAGE) -> list[WriteBody]:
    """A follow's put or an unfollow's retraction, one body per cluster;
    none if there is nothing to change."""
    if type(recent) is not int or not 1 <= recent <= MAX_PAGE:
        raise ValueError(f"recent must be an int in 1..{MAX_PAGE}, got {recent!r}")
    since = graph.follow_time(store, action.follower_id, action.followee_id)
    if action.action == "unfollow":
        assert action.follow_at is not None
        if since == action.follow_at:
            raise FollowStillThere(f"{action.follower_id} still follows {action.followee_id} (since "
                                   f"{since}): the unfollow is not in MySQL yet")
        return make_bodies("retract", action.followee_id, [(action.follower_id, action.follow_at)])
    if since is None:
        return []
    columns = window(store, action.followee_id, since, recent=recent, cap=cap)
    return make_bodies("put", action.followee_id, [(action.follower_id, since)], columns)
