"""Fan-out of a new pin, one page of followers per job.

A job walks the pinner's followers, then the board's (phase ``pinner``,
then ``board``), ``page_size`` at a time with the app data's keyset cursor,
and each page becomes one put per cluster: the pin's column in the rows of
the followers whose follow brings it, each at the time of that follow (its
version, ``tasks.feeds.writes``). The step also says what job comes next
(the same phase from the cursor, the board phase, or none) and at what
priority to run it.

Which followers the pin goes to (``tasks.feeds.follow`` says what a follow
brings): everyone who followed before the pin was created, and of those who
followed at or after it, the ones for whom it is still among the account's
``recent`` newest pins at their follow's time. Their follow's own job puts
it too; a fan-out that runs late, early or twice puts the same cells, and
never a pin a follow does not bring.

A user who follows both the pinner and the board is reached in both
phases, with each follow's version: the feed shows the pin once, and it
stays while either follow does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from tasks import bodies
from tasks.appdata import graph, mappings
from tasks.appdata.ids import ObjectType, expect_type
from tasks.appdata.mappings import MAX_PAGE, SEQUENCE_MAX, Cursor, Page
from tasks.appdata.store import AppData
from tasks.appdata.tables import BOARD_HAS_PINS, USER_HAS_PINS
from tasks.feeds.cells import qualifier
from tasks.feeds.follow import DEFAULT_RECENT_PINS
from tasks.feeds.writes import WriteBody, make_bodies

Phase = Literal["pinner", "board"]
PHASES: tuple[Phase, ...] = ("pinner", "board")
DEFAULT_PAGE_SIZE = 1000
DEFAULT_HUGE_FOLLOWERS = 100_000  # more followers than this: priority 3
NORMAL_PRIORITY = 1
HUGE_PRIORITY = 3
NEVER = SEQUENCE_MAX


class InvalidFanoutJob(ValueError):
    pass


def fanout_key(job: FanoutJob) -> str:
    """A fan-out page's fairness key: its pinner's, so that a pinner with
    many followers (thousands of pages) takes turns with every other
    pinner's fan-outs instead of holding them back."""
    return f"pinner:{job.pinner_id}"


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


def _followed_too_late(store: AppData, job: FanoutJob, account: int, page: Page, recent: int) -> int:
    """The follow time from which a follow of ``account`` no longer brings
    the pin: the creation time of the ``recent``-th of the account's pins
    newer than it (or never, when there are fewer). Read only when someone
    on the page followed after the pin was created."""
    if all(e.sequence < job.created_at_ms for e in page.edges):
        return NEVER
    table = USER_HAS_PINS if job.phase == "pinner" else BOARD_HAS_PINS
    newer = mappings.newer(store, table, account, Cursor(job.created_at_ms, job.pin_id), recent)
    return newer[recent - 1].sequence if len(newer) >= recent else NEVER


@dataclass(frozen=True, slots=True)
class FanoutStep:
    writes: list[WriteBody]  # one put per cluster, or none for an empty page
    next_job: FanoutJob | None  # None: the fan-out is done
    priority: int  # of this page's writes and of the next job


def fanout_page(store: AppData, job: FanoutJob, *, huge_followers: int = DEFAULT_HUGE_FOLLOWERS,
                recent: int = DEFAULT_RECENT_PINS) -> FanoutStep:
    """One page of followers of ``job``'s phase: the writes for it and the next job."""
    account = job.pinner_id if job.phase == "pinner" else job.board_id
    priority = job.priority
    if priority is None:
        priority = HUGE_PRIORITY if graph.follower_count(store, account) > huge_followers else NORMAL_PRIORITY
    walk = graph.followers_of_user if job.phase == "pinner" else graph.followers_of_board
    page = walk(store, account, limit=job.page_size, cursor=job.cursor)
    too_late = _followed_too_late(store, job, account, page, recent)
    rows = [(e.to_id, e.sequence) for e in page.edges if e.sequence < too_late]
    writes = make_bodies("put", account, rows, [qualifier(job.created_at_ms, job.pin_id)])
    next_job: FanoutJob | None
    if page.next is not None:
        next_job = replace(job, cursor=page.next.encode(), priority=priority)
    elif job.phase == "pinner":
        next_job = replace(job, phase="board", cursor=None, priority=None)  # the board's count decides its phase
    else:
        next_job = None
    return FanoutStep(writes, next_job, priority)
