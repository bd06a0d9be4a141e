"""A deterministic generator of a realistic follow graph with a heavy tail.

    python -m tasks.appdata.generate --users 200000 --boards 300000 --pins 500000 \\
        --follows-per-user 8 --celebrities 3 --celebrity-followers 100000 --seed 7

Shape, all from one ``random.Random(seed)``:
- users on random shards; boards owned by users drawn with Zipf weights
  (a few users own many boards), pins on boards drawn with Zipf weights
  (a few boards get most pins), the pinner being the board's owner;
- follows: ``users * follows_per_user`` (follower, followee) draws, the
  follower uniform and the followee Zipf-weighted over a random ranking of
  users (s = ``zipf_s``), self-follows and repeats dropped: follower counts
  fall off as a power law;
- the ``celebrities`` top-ranked users additionally get
  ``celebrity_followers`` distinct followers each (a uniform sample);
- board follows: ``users * board_follows_per_user`` draws, boards Zipf-weighted;
- times (created_at, follow sequence) spread over ``span_days`` before ``now_ms``.

The plan (``plan``) is a pure function of the spec and the shard list, so a
seed reproduces the same graph; on empty shard databases the ids are the
same too. ``write`` inserts it with multi-row INSERTs (5,000 rows each),
objects first, then every mapping with its reverse, printing progress.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tasks.appdata import mappings, objects, schema
from tasks.appdata.ids import ObjectType
from tasks.appdata.names import person_name
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import (
    BOARD_FOLLOWED_BY_USER,
    BOARD_HAS_PINS,
    USER_FOLLOWED_BY_USER,
    USER_FOLLOWS_BOARD,
    USER_FOLLOWS_USER,
    USER_HAS_BOARDS,
    USER_HAS_PINS,
    MappingTable,
)

DAY_MS = 86_400_000
WRITE_CHUNK = 20_000


@dataclass(frozen=True, slots=True)
class GraphSpec:
    users: int = 10_000
    boards: int = 20_000
    pins: int = 50_000
    follows_per_user: float = 5.0
    board_follows_per_user: float = 1.0
    celebrities: int = 3
    celebrity_followers: int = 5_000
    zipf_s: float = 1.1
    span_days: float = 30.0
    seed: int = 1
    now_ms: int = 0  # 0: the current time (pass one to reproduce times exactly)

    def __post_init__(self) -> None:
        if self.users < 1 or self.boards < 0 or self.pins < 0:
            raise ValueError("users must be >= 1, boards and pins >= 0")
        if self.pins and not self.boards:
            raise ValueError("pins need at least one board")
        if self.celebrities < 0 or self.celebrities > self.users:
            raise ValueError(f"celebrities must be in 0..users ({self.users})")
        if self.celebrities and not 0 <= self.celebrity_followers <= self.users - 1:
            raise ValueError(f"celebrity_followers must be in 0..users-1 ({self.users - 1})")
        if self.follows_per_user < 0 or self.board_follows_per_user < 0 or self.zipf_s <= 0 or self.span_days <= 0:
            raise ValueError("follows per user must be >= 0; zipf_s and span_days > 0")


@dataclass(slots=True)
class GraphPlan:
    """The graph by index (user i, board j, pin k), before any id exists."""

    user_shard: list[int]
    user_created: list[int]
    board_owner: list[int]
    board_created: list[int]
    pin_board: list[int]
    pin_created: list[int]
    user_follows: list[tuple[int, int, int]]  # follower, followee, ms
    board_follows: list[tuple[int, int, int]]  # follower, board, ms
    celebrities: list[int]  # user indexes, most followed first
    user_names: list[str]


@dataclass(slots=True)
class GraphSummary:
    users: int = 0
    boards: int = 0
    pins: int = 0
    user_follows: int = 0
    board_follows: int = 0
    mapping_rows: int = 0
    top_accounts: list[tuple[int, int]] = field(default_factory=list)  # (user id, followers)
    celebrity_ids: list[int] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    user_ids: list[int] = field(default_factory=list)
    board_ids: list[int] = field(default_factory=list)
    pin_ids: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        def rate(rows: int, phase: str) -> str:
            s = self.seconds.get(phase, 0.0)
            return f"{rows:,} in {s:.2f} s ({rows / s:,.0f}/s)" if s > 0 else f"{rows:,}"

        out = [
            f"users:          {rate(self.users, 'users')}",
            f"boards:         {rate(self.boards, 'boards')}",
            f"pins:           {rate(self.pins, 'pins')}",
            f"user follows:   {rate(self.user_follows, 'user_follows')} (x2 rows: forward and reverse)",
            f"board follows:  {rate(self.board_follows, 'board_follows')} (x2 rows)",
            f"mapping rows:   {self.mapping_rows:,}",
            f"total:          {sum(self.seconds.values()):.2f} s",
            "most followed:  " + ", ".join(f"{uid} ({n:,})" for uid, n in self.top_accounts),
        ]
        return out


def _zipf_cum_weights(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 1) ** s for rank in range(n)))


def plan(spec: GraphSpec, shards: Sequence[int]) -> GraphPlan:
    """The graph for ``spec`` on ``shards``: a pure function of both."""
    rng = random.Random(spec.seed)
    now = spec.now_ms or now_ms()
    span = int(spec.span_days * DAY_MS)

    def when() -> int:
        return now - rng.randrange(span)

    shard_list = list(shards)
    user_shard = [rng.choice(shard_list) for _ in range(spec.users)]
    user_created = [when() for _ in range(spec.users)]
    # A random ranking of users by popularity (rank 0 most popular).
    ranking = list(range(spec.users))
    rng.shuffle(ranking)
    user_weights = _zipf_cum_weights(spec.users, spec.zipf_s)

    board_owner = rng.choices(ranking, cum_weights=user_weights, k=spec.boards)
    board_created = [max(user_created[o], when()) for o in board_owner]
    board_ranking = list(range(spec.boards))
    rng.shuffle(board_ranking)
    board_weights = _zipf_cum_weights(spec.boards, spec.zipf_s) if spec.boards else []
    pin_board = rng.choices(board_ranking, cum_weights=board_weights, k=spec.pins) if spec.pins else []
    pin_created = [max(board_created[b], when()) for b in pin_board]

    pairs: set[tuple[int, int]] = set()
    user_follows: list[tuple[int, int, int]] = []
    celebrities = ranking[: spec.celebrities]
    for celebrity in celebrities:
        sample = rng.sample(range(spec.users), min(spec.users, spec.celebrity_followers + 1))
        followers = [f for f in sample if f != celebrity][: spec.celebrity_followers]
        for follower in followers:
            pairs.add((follower, celebrity))
            user_follows.append((follower, celebrity, when()))
    draws = round(spec.users * spec.follows_per_user)
    followees = rng.choices(ranking, cum_weights=user_weights, k=draws)
    for followee in followees:
        follower = rng.randrange(spec.users)
        if follower != followee and (follower, followee) not in pairs:
            pairs.add((follower, followee))
            user_follows.append((follower, followee, when()))

    board_follows: list[tuple[int, int, int]] = []
    if spec.boards:
        seen: set[tuple[int, int]] = set()
        draws = round(spec.users * spec.board_follows_per_user)
        for board in rng.choices(board_ranking, cum_weights=board_weights, k=draws):
            follower = rng.randrange(spec.users)
            if board_owner[board] != follower and (follower, board) not in seen:
                seen.add((follower, board))
                board_follows.append((follower, board, when()))
    user_follows, board_follows = _distinct_follow_times(user_follows, board_follows)
    # Names from their own generator: the rest of the graph stays what it was for a seed.
    names = random.Random(f"names:{spec.seed}")
    return GraphPlan(
        user_shard, user_created, board_owner, board_created, pin_board, pin_created,
        user_follows, board_follows, celebrities, [person_name(names) for _ in user_created],
    )


Follows = list[tuple[int, int, int]]


def _distinct_follow_times(user_follows: Follows, board_follows: Follows) -> tuple[Follows, Follows]:
    """No two follows of one user share a time, as ``graph.follow_clock``
    guarantees for follows made by the application: a follow's time versions
    its cells in the user's feed. A clash moves the later-listed follow 1 ms on."""
    used: set[tuple[int, int]] = set()

    def distinct(follows: Follows) -> Follows:
        out = []
        for follower, followee, ms in follows:
            while (follower, ms) in used:
                ms += 1
            used.add((follower, ms))
            out.append((follower, followee, ms))
        return out

    return distinct(user_follows), distinct(board_follows)


class Progress:
    """One line on stderr at most every ``every_s``: phase, rows, rate."""

    def __init__(self, enabled: bool, every_s: float = 1.0) -> None:
        self.enabled = enabled
        self.every_s = every_s
        self._last = 0.0

    def __call__(self, phase: str, done: int, total: int, started: float) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < self.every_s and done < total):
            return
        self._last = now
        elapsed = max(now - started, 1e-9)
        print(f"  {phase}: {done:,}/{total:,} rows ({done / elapsed:,.0f} rows/s)", file=sys.stderr, flush=True)


ProgressFn = Callable[[str, int, int, float], None]


def _create_objects(
    store: AppData, kind: ObjectType, shards: list[int], rows: list[tuple[int, dict[str, object]]],
    phase: str, progress: ProgressFn,
) -> list[int]:
    """Insert rows (index order) grouped by shard; their ids in index order."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for index, shard in enumerate(shards):
        by_shard[shard].append(index)
    ids = [0] * len(rows)
    started, done = time.monotonic(), 0
    for shard in sorted(by_shard):
        indexes = by_shard[shard]
        for start in range(0, len(indexes), WRITE_CHUNK):
            part = indexes[start : start + WRITE_CHUNK]
            new_ids = objects.create_many(store, kind, shard, [rows[i] for i in part])
            for index, new_id in zip(part, new_ids, strict=True):
                ids[index] = new_id
            done += len(part)
            progress(phase, done, len(rows), started)
    return ids


def _add_mappings(
    store: AppData, work: list[tuple[MappingTable, list[tuple[int, int, int]]]], phase: str, progress: ProgressFn
) -> int:
    total = sum(len(rows) for _, rows in work)
    started, done, added = time.monotonic(), 0, 0
    for table, rows in work:
        for start in range(0, len(rows), WRITE_CHUNK):
            part = rows[start : start + WRITE_CHUNK]
            added += mappings.add_many(store, table, part)
            done += len(part)
            progress(phase, done, total, started)
    return added


def write(store: AppData, graph: GraphPlan, *, progress: ProgressFn | None = None) -> GraphSummary:
    """Insert ``graph``: objects, then mappings with their reverses."""
    report: ProgressFn = progress or (lambda *_: None)
    summary = GraphSummary()

    t = time.monotonic()
    user_rows: list[tuple[int, dict[str, object]]] = [
        (created, {"username": f"user{i}", "name": graph.user_names[i]}) for i, created in enumerate(graph.user_created)
    ]
    user_ids = _create_objects(store, ObjectType.USER, graph.user_shard, user_rows, "users", report)
    summary.seconds["users"] = time.monotonic() - t

    t = time.monotonic()
    board_shards = [graph.user_shard[o] for o in graph.board_owner]
    board_rows: list[tuple[int, dict[str, object]]] = [
        (created, {"name": f"Board {j}", "user_id": user_ids[owner]})
        for j, (owner, created) in enumerate(zip(graph.board_owner, graph.board_created, strict=True))
    ]
    board_ids = _create_objects(store, ObjectType.BOARD, board_shards, board_rows, "boards", report)
    has_boards = [(user_ids[o], board_ids[j], graph.board_created[j]) for j, o in enumerate(graph.board_owner)]
    summary.mapping_rows += _add_mappings(store, [(USER_HAS_BOARDS, has_boards)], "user_has_boards", report)
    summary.seconds["boards"] = time.monotonic() - t

    t = time.monotonic()
    pin_shards = [board_shards[b] for b in graph.pin_board]
    pin_rows: list[tuple[int, dict[str, object]]] = []
    for k, (board, created) in enumerate(zip(graph.pin_board, graph.pin_created, strict=True)):
        owner = user_ids[graph.board_owner[board]]
        pin_rows.append((created, {"details": f"Pin {k}", "link": "", "user_id": owner, "board_id": board_ids[board]}))
    pin_ids = _create_objects(store, ObjectType.PIN, pin_shards, pin_rows, "pins", report)
    board_pins, user_pins = [], []
    for k, b in enumerate(graph.pin_board):
        board_pins.append((board_ids[b], pin_ids[k], graph.pin_created[k]))
        user_pins.append((user_ids[graph.board_owner[b]], pin_ids[k], graph.pin_created[k]))
    summary.mapping_rows += _add_mappings(
        store, [(BOARD_HAS_PINS, board_pins), (USER_HAS_PINS, user_pins)], "pin mappings", report
    )
    summary.seconds["pins"] = time.monotonic() - t

    t = time.monotonic()
    forward = [(user_ids[a], user_ids[b], ms) for a, b, ms in graph.user_follows]
    reverse = [(followee, follower, ms) for follower, followee, ms in forward]
    summary.mapping_rows += _add_mappings(
        store, [(USER_FOLLOWS_USER, forward), (USER_FOLLOWED_BY_USER, reverse)], "user follows", report
    )
    summary.seconds["user_follows"] = time.monotonic() - t

    t = time.monotonic()
    forward = [(user_ids[u], board_ids[b], ms) for u, b, ms in graph.board_follows]
    reverse = [(board, user, ms) for user, board, ms in forward]
    summary.mapping_rows += _add_mappings(
        store, [(USER_FOLLOWS_BOARD, forward), (BOARD_FOLLOWED_BY_USER, reverse)], "board follows", report
    )
    summary.seconds["board_follows"] = time.monotonic() - t

    followers: dict[int, int] = defaultdict(int)
    for _, followee, _ in graph.user_follows:
        followers[followee] += 1
    top = sorted(followers.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    summary.users, summary.boards, summary.pins = len(user_ids), len(board_ids), len(pin_ids)
    summary.user_follows, summary.board_follows = len(graph.user_follows), len(graph.board_follows)
    summary.top_accounts = [(user_ids[i], n) for i, n in top]
    summary.celebrity_ids = [user_ids[i] for i in graph.celebrities]
    summary.user_ids, summary.board_ids, summary.pin_ids = user_ids, board_ids, pin_ids
    return summary


def generate(store: AppData, spec: GraphSpec, *, progress: ProgressFn | None = None) -> GraphSummary:
    """Plan and write (the shard databases must exist: ``schema.create_shards``)."""
    t = time.monotonic()
    graph = plan(spec, store.shard_map.shards)
    planned = time.monotonic() - t
    summary = write(store, graph, progress=progress)
    summary.seconds = {"plan": planned, **summary.seconds}
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    defaults = GraphSpec()
    parser = argparse.ArgumentParser(
        prog="python -m tasks.appdata.generate",
        description="Seed the app-data shards (PINLATER_APPDATA_SHARDS) with a heavy-tailed follow graph.",
    )
    parser.add_argument("--users", type=int, default=defaults.users)
    parser.add_argument("--boards", type=int, default=defaults.boards)
    parser.add_argument("--pins", type=int, default=defaults.pins)
    parser.add_argument("--follows-per-user", type=float, default=defaults.follows_per_user)
    parser.add_argument("--board-follows-per-user", type=float, default=defaults.board_follows_per_user)
    parser.add_argument("--celebrities", type=int, default=defaults.celebrities)
    parser.add_argument("--celebrity-followers", type=int, default=defaults.celebrity_followers)
    parser.add_argument("--zipf-s", type=float, default=defaults.zipf_s)
    parser.add_argument("--span-days", type=float, default=defaults.span_days)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--now-ms", type=int, default=0, help="the time the graph ends at (default: now)")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    try:
        spec = GraphSpec(
            users=args.users, boards=args.boards, pins=args.pins, follows_per_user=args.follows_per_user,
            board_follows_per_user=args.board_follows_per_user, celebrities=args.celebrities,
            celebrity_followers=args.celebrity_followers, zipf_s=args.zipf_s, span_days=args.span_days,
            seed=args.seed, now_ms=args.now_ms,
        )
        settings = AppDataSettings.from_env()
    except ValueError as exc:  # a SettingError too
        parser.error(str(exc))
    with AppData(settings) as store:
        schema.create_shards(store)
        summary = generate(store, spec, progress=Progress(not args.no_progress))
    print(f"shards: {len(settings.shard_map.shards)} on {len(settings.shard_map.servers)} server(s)")
    for line in summary.lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
