"""Fan-out of a new pin, one page of followers per job.

A job walks the pinner's followers, then the board's (phase ``pinner``,
then ``board``), ``page_size`` at a time with the app data's keyset cursor,
and each page becomes one put per cluster: the pin's column in every
follower's row at ts = the pin's creation time. The step also says what job
comes next (the same phase from the cursor, the board phase, or none) and
at what priority to run it.

A user who follows both the pinner and the board is reached in both
phases. That is harmless: the column is the same and so is the timestamp,
so the second put rewrites the same cell and the feed shows the pin once.
Deduplicating across phases would need state the job does not carry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from tasks.appdata import graph
from tasks.appdata.ids import ObjectType, expect_type
from tasks.appdata.mappings import MAX_PAGE
from tasks.appdata.store import AppData
from tasks.feeds import bodies
from tasks.feeds.cells import qualifier
from tasks.feeds.writes import WriteBody, make_bodies

Phase = Literal["pinner", "board"]
PHASES: tuple[Phase, ...] = ("pinner", "board")
DEFAULT_PAGE_SIZE = 1000
DEFAULT_HUGE_FOLLOWERS = 100_000  # more followers than this: priority 3
NORMAL_PRIORITY = 1
HUGE_PRIORITY = 3


class InvalidFanoutJob(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class FanoutJob:
    pin_id: int
    pinner_id: int
    board_id: int
    created_at_ms: int
    phase: Phase = "pinner"
    cursor: str | None = None  # the app data's follower cursor; None: the phase's first page
    page_size: int = DEFAULT_PAGE_SIZE
    # Set on a phase's first page from the follower count, then carried, so
    # the (index range) count runs once per phase, not once per page.
    priority: int | None = None

    def __post_init__(self) -> None:
        try:
            expect_type(self.pin_id, ObjectType.PIN)
            expect_type(self.pinner_id, ObjectType.USER)
            expect_type(self.board_id, ObjectType.BOARD)
            qualifier(self.created_at_ms, self.pin_id)
        except ValueError as exc:
            raise InvalidFanoutJob(f"fanout job: {exc}") from None
        if self.created_at_ms <= 0:
            raise InvalidFanoutJob(f"fanout job: created_at must be > 0, got {self.created_at_ms}")
        if self.phase not in PHASES:
            raise InvalidFanoutJob(f"fanout job: phase must be pinner or board, got {self.phase!r}")
        if type(self.page_size) is not int or not 1 <= self.page_size <= MAX_PAGE:
            raise InvalidFanoutJob(f"fanout job: page_size must be in 1..{MAX_PAGE}, got {self.page_size!r}")
        if self.cursor is not None and not isinstance(self.cursor, str):
            raise InvalidFanoutJob(f"fanout job: cursor must be text or null, got {self.cursor!r}")
        if self.priority not in (None, NORMAL_PRIORITY, HUGE_PRIORITY):
            raise InvalidFanoutJob(f"fanout job: priority must be null, 1 or 3, got {self.priority!r}")

    def to_json(self) -> str:
        fields: dict[str, Any] = {
            "pin_id": self.pin_id,
            "pinner_id": self.pinner_id,
            "board_id": self.board_id,
            "created_at_ms": self.created_at_ms,
            "phase": self.phase,
            "cursor": self.cursor,
            "page_size": self.page_size,
            "priority": self.priority,
        }
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> FanoutJob:
        required = ("pin_id", "pinner_id", "board_id", "created_at_ms")
        optional = ("phase", "cursor", "page_size", "priority")
        return cls(**bodies.load(text, "fanout job", required, optional, InvalidFanoutJob))


@dataclass(frozen=True, slots=True)
class FanoutStep:
    writes: list[WriteBody]  # one put per cluster, or none for an empty page
    next_job: FanoutJob | None  # None: the fan-out is done
    priority: int  # of this page's writes and of the next job


def fanout_page(store: AppData, job: FanoutJob, *, huge_followers: int = DEFAULT_HUGE_FOLLOWERS) -> FanoutStep:
    """One page of followers of ``job``'s phase: the writes for it and the next job."""
    account = job.pinner_id if job.phase == "pinner" else job.board_id
    priority = job.priority
    if priority is None:
        priority = HUGE_PRIORITY if graph.follower_count(store, account) > huge_followers else NORMAL_PRIORITY
    walk = graph.followers_of_user if job.phase == "pinner" else graph.followers_of_board
    page = walk(store, account, limit=job.page_size, cursor=job.cursor)
    writes = make_bodies("put", page.ids, [qualifier(job.created_at_ms, job.pin_id)], job.created_at_ms)
    next_job: FanoutJob | None
    if page.next is not None:
        next_job = replace(job, cursor=page.next.encode(), priority=priority)
    elif job.phase == "pinner":
        next_job = replace(job, phase="board", cursor=None, priority=None)  # the board's count decides its phase
    else:
        next_job = None
    return FanoutStep(writes, next_job, priority)
