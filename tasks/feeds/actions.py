"""What application code calls when a user pins, follows or unfollows:
the app data is written first (MySQL is the source of truth), then the feed
job is enqueued on PinLater with a JSON body, through any PinLater client
(the in-process ``JobService`` or the Thrift client of ``PINLATER_SERVERS``);
an unfollow is the one exception (its job first: see ``unfollow``). The
Celery workers of ``tasks.feeds.tasks`` do the rest.

    actions = FeedActions(store, pinlater.connect(Settings.from_env()))
    pin = actions.create_pin(pinner, board, {"title": "..."})
    actions.follow(user, other_user_or_board)

A write that succeeded in MySQL and whose enqueue failed raises: the caller
retries the action (both steps are idempotent: a follow edge written
twice is one edge, a fan-out enqueued twice writes the same cells).
"""

from __future__ import annotations

from pinlater.client_api import PinLaterClient
from pinlater.models import Job
from tasks.appdata import graph
from tasks.appdata.ids import ObjectType, split_id
from tasks.appdata.objects import AppObject
from tasks.appdata.store import AppData, now_ms
from tasks.feeds import queues
from tasks.feeds.fanout import FanoutJob, fanout_key
from tasks.feeds.follow import FollowAction
from tasks.feeds.settings import FeedSettings
from tasks.feeds.trim import SweepJob


class FeedActions:
    def __init__(self, store: AppData, client: PinLaterClient, settings: FeedSettings | None = None) -> None:
        self.store = store
        self.client = client
        self.settings = settings or FeedSettings.from_env()
        self._queues_ready = False

    def ensure_queues(self) -> None:
        """Creates the feed queues with their defaults where missing (an
        existing queue keeps the config its operators gave it)."""
        for name in queues.ALL:
            self.client.create_queue(name, **queues.create_options(name))
        self._queues_ready = True

    def _enqueue(self, queue: str, body: str, priority: int = 1, key: str = "") -> str:
        if not self._queues_ready:
            self.ensure_queues()
        return self.client.enqueue(queue, [Job(body.encode(), priority=priority, key=key)])[0]

    # -- pins -----------------------------------------------------------------------
    def create_pin(
        self, pinner_id: int, board_id: int, data: dict[str, object], *, created_at_ms: int | None = None
    ) -> AppObject:
        """A new pin (or repin) in MySQL, then its fan-out job."""
        pin = graph.create_pin(self.store, pinner_id, board_id, data, created_at_ms=created_at_ms)
        self.fan_out(pin)
        return pin

    def fan_out(self, pin: AppObject) -> str:
        """Enqueues the fan-out of an existing pin; its job's descriptor."""
        job = FanoutJob(
            pin_id=pin.id,
            pinner_id=int(pin.data["user_id"]),
            board_id=int(pin.data["board_id"]),
            created_at_ms=pin.created_at_ms,
            page_size=self.settings.page_size,
        )
        return self._enqueue(queues.FANOUT, job.to_json(), key=fanout_key(job))

    # -- follows --------------------------------------------------------------------
    def follow(self, follower_id: int, followee_id: int, *, at_ms: int | None = None) -> bool:
        """Follows a user or a board; True if the edge is new. The feed job
        runs whether or not it is (a retried action completes its feed)."""
        at = now_ms() if at_ms is None else at_ms
        if split_id(followee_id).type is ObjectType.BOARD:
            added = graph.follow_board(self.store, follower_id, followee_id, at_ms=at)
        else:
            added = graph.follow_user(self.store, follower_id, followee_id, at_ms=at)
        self._enqueue(queues.FOLLOW, FollowAction(follower_id, followee_id, "follow", at).to_json())
        return added

    def unfollow(self, follower_id: int, followee_id: int, *, at_ms: int | None = None) -> bool:
        """Unfollows a user or a board; True if they followed it. The feed
        job is enqueued first, naming the follow it undoes (its time, read
        here), then the follow leaves MySQL: a failure in between leaves a
        job that waits for the removal, never a removal with no job. A
        retried call finds the follow gone and enqueues nothing again."""
        at = now_ms() if at_ms is None else at_ms
        since = graph.follow_time(self.store, follower_id, followee_id)
        if since is None:
            return False
        action = FollowAction(follower_id, followee_id, "unfollow", at, follow_at=since)
        self._enqueue(queues.FOLLOW, action.to_json())
        if split_id(followee_id).type is ObjectType.BOARD:
            return graph.unfollow_board(self.store, follower_id, followee_id)
        return graph.unfollow_user(self.store, follower_id, followee_id)

    # -- trimming -------------------------------------------------------------------
    def start_sweep(self, cap: int | None = None) -> str:
        """A sweep of both clusters now (``celery beat`` starts one every
        ``PINLATER_FEED_SWEEP_INTERVAL_S``)."""
        return self._enqueue(queues.TRIM_SWEEP, SweepJob(None, None, cap).to_json())
