"""The graph generator: deterministic plans, what it writes, its heavy tail
(a 100,000-follower account) and its CLI."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

from tasks.appdata import generate, graph, mappings, objects
from tasks.appdata.generate import GraphSpec
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWS_BOARD, USER_HAS_BOARDS
from tests.servers import REPO
from tests.support.appdata import ENV

NOW = 1_760_000_000_000


def test_plan_is_a_function_of_the_seed() -> None:
    spec = GraphSpec(users=2000, boards=3000, pins=5000, celebrities=2, celebrity_followers=500, seed=11, now_ms=NOW)
    a, b = generate.plan(spec, range(4)), generate.plan(spec, range(4))
    assert a == b
    c = generate.plan(replace(spec, seed=12), range(4))
    assert c.user_follows != a.user_follows and c.user_shard != a.user_shard
    assert all(NOW - 30 * generate.DAY_MS < ms <= NOW for _, _, ms in a.user_follows)
    assert len({(f, e) for f, e, _ in a.user_follows}) == len(a.user_follows)
    assert all(f != e for f, e, _ in a.user_follows)


def test_small_graph_is_written_as_planned(appdata: AppData) -> None:
    spec = GraphSpec(users=500, boards=800, pins=2000, follows_per_user=4, board_follows_per_user=2,
                     celebrities=1, celebrity_followers=300, seed=3, now_ms=NOW)
    plan = generate.plan(spec, appdata.shard_map.shards)
    summary = generate.write(appdata, plan)
    assert (summary.users, summary.boards, summary.pins) == (500, 800, 2000)
    assert summary.user_follows == len(plan.user_follows) and summary.board_follows == len(plan.board_follows)
    # Every mapping row is new, forward and reverse.
    expected_rows = 800 + 2 * 2000 + 2 * summary.user_follows + 2 * summary.board_follows
    assert summary.mapping_rows == expected_rows

    followers = Counter(e for _, e, _ in plan.user_follows)
    for index, n in followers.most_common(5):
        assert graph.follower_count(appdata, summary.user_ids[index]) == n
    board_followers = Counter(b for _, b, _ in plan.board_follows)
    top_board, n = board_followers.most_common(1)[0]
    assert graph.follower_count(appdata, summary.board_ids[top_board]) == n
    follower, board, _ = plan.board_follows[0]
    assert mappings.exists(appdata, USER_FOLLOWS_BOARD, summary.user_ids[follower], summary.board_ids[board])

    pin = objects.get(appdata, summary.pin_ids[0])
    assert pin is not None and pin.created_at_ms == plan.pin_created[0]
    board_id = pin.data["board_id"]
    assert board_id == summary.board_ids[plan.pin_board[0]]
    owner = summary.user_ids[plan.board_owner[plan.pin_board[0]]]
    assert pin.data["user_id"] == owner
    assert mappings.exists(appdata, USER_HAS_BOARDS, owner, board_id)
    assert pin.id in {e.to_id for e in graph.recent_pins_of_board(appdata, board_id, 10_000)}


def test_heavy_tail_with_a_100k_follower_account(appdata: AppData) -> None:
    """The dedicated big test: one account with 100,000 followers on top of
    a Zipf tail. Measured on the 2-core box: ~6 s for ~101k users and
    ~130k follows (each a forward and a reverse row)."""
    spec = GraphSpec(users=100_001, boards=1000, pins=1000, follows_per_user=0.3, board_follows_per_user=0.05,
                     celebrities=1, celebrity_followers=100_000, seed=5, now_ms=NOW)
    started = time.monotonic()
    summary = generate.generate(appdata, spec)
    elapsed = time.monotonic() - started

    celebrity = summary.celebrity_ids[0]
    assert summary.top_accounts[0] == (celebrity, 100_000)
    assert graph.follower_count(appdata, celebrity) == 100_000
    page = graph.followers_of_user(appdata, celebrity, limit=5000)
    assert len(page.ids) == 5000 and page.next is not None

    # The rest is a power law: the next accounts far above the typical one.
    plan_counts = Counter(e for _, e, _ in generate.plan(spec, appdata.shard_map.shards).user_follows)
    ordinary = sorted((n for i, n in plan_counts.items() if summary.user_ids[i] != celebrity), reverse=True)
    assert ordinary[0] > 50 * statistics.median(ordinary)
    assert sum(ordinary[:100]) > 0.3 * sum(ordinary)  # the top 0.1% holds a large share
    follows = summary.user_follows
    print(f"\n100k-follower graph: {follows:,} follows, {summary.mapping_rows:,} rows in {elapsed:.1f} s; "
          + ", ".join(f"{k} {v:.2f}s" for k, v in summary.seconds.items()))
    # Not a speed target (bench/ measures speed): a guard against a slip into
    # per-row round trips, which take many minutes; a loaded machine takes 30 s.
    assert elapsed < 180


def test_cli_prints_a_summary(appdata: AppData) -> None:
    env = {**os.environ, **ENV}
    result = subprocess.run(
        [sys.executable, "-m", "tasks.appdata.generate", "--users", "300", "--boards", "200", "--pins", "400",
         "--celebrities", "2", "--celebrity-followers", "250", "--seed", "9"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "shards: 4 on 1 server(s)" in result.stdout
    assert "users:          300" in result.stdout
    top = re.search(r"most followed: +\d+ \(([\d,]+)\), \d+ \(([\d,]+)\)", result.stdout)
    assert top is not None and all(int(n.replace(",", "")) >= 250 for n in top.groups())  # the 2 celebrities
    assert "rows/s" in result.stderr  # progress lines

    bad = subprocess.run(
        [sys.executable, "-m", "tasks.appdata.generate", "--users", "10", "--celebrities", "1",
         "--celebrity-followers", "100"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "celebrity_followers" in bad.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "tasks.appdata.generate"], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**env, "PINLATER_APPDATA_SHARDS": "0-3=http://x"},
    )
    assert bad.returncode == 2 and "PINLATER_APPDATA_SHARDS" in bad.stderr


