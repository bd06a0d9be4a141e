"""The pure parts: pages of a plan, the jobs' bodies and a run's batch id,
progress math, the one-line report, the kinds registry and differences."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tasks.backfill import kinds
from tasks.backfill.cli import describe, text_bar
from tasks.backfill.kinds import Difference
from tasks.backfill.pages import InvalidPageJob, PageJob, RunEnd, parse_job, run_batch
from tasks.backfill.plan import Plan, check_page_size, local_range, pages_for
from tasks.backfill.progress import format_duration, progress
from tasks.backfill.records import Run


def test_pages_cover_every_local_id_once() -> None:
    assert [pages_for(n, 500) for n in (0, 1, 499, 500, 501, 1000, 1001)] == [0, 1, 1, 1, 2, 2, 3]
    assert local_range(1, 500) == (1, 500) and local_range(3, 500) == (1001, 1500)
    bounds = [local_range(page, 100) for page in range(1, pages_for(1234, 100) + 1)]
    covered = [i for first, last in bounds for i in range(first, last + 1)]
    assert covered[:1234] == list(range(1, 1235)) and len(covered) == len(set(covered)) == 1300
    with pytest.raises(ValueError):
        local_range(0, 10)
    for bad in (0, -1, 10_001, 1.5, True):
        with pytest.raises(ValueError):
            check_page_size(bad)


def test_a_plan_chains_each_shard_and_skips_empty_ones() -> None:
    plan = Plan.from_max_locals({3: 1000, 0: 1, 1: 0}, 500)
    assert plan.pages == {0: 1, 1: 0, 3: 2} and plan.total_pages == 3
    assert plan.first_pages() == [0, 3]
    assert plan.next_page(3, 1) == 2 and plan.next_page(3, 2) is None and plan.next_page(0, 1) is None
    assert plan.has(3, 2) and not plan.has(3, 3) and not plan.has(1, 1) and not plan.has(9, 1)


def test_a_job_body_is_a_page_or_its_runs_end() -> None:
    run = Run(7, "feeds", "primary", Plan(500, {0: 4}), "running", 1_700_000_000_000, None)
    batch = run_batch("appdata_", run)
    assert batch.startswith("backfill.b") and len(batch) == len("backfill.b") + 24
    # Known from the run alone; another database's (or a remade) run 7 has another batch.
    assert batch == run_batch("appdata_", run)
    assert batch != run_batch("other_", run)
    assert batch != run_batch("appdata_", Run(7, "feeds", "primary", Plan(500, {0: 4}), "running", 1, None))
    page = PageJob(7, 0, 2, batch)
    assert parse_job(page.to_json()) == page and page.following(3) == PageJob(7, 0, 3, batch)
    assert parse_job('{"run": 7, "shard": 0, "page": 2}') == PageJob(7, 0, 2)  # a run begun before batches
    assert parse_job(RunEnd(7).to_json()) == RunEnd(7)
    for bad, message in (
        ('{"run": 7, "end": false}', "run end: expected"),
        ('{"run": 7, "end": true, "page": 1}', "run end: expected"),
        ('{"run": 7, "shard": 0}', "missing ['page']"),
        ('{"run": 7, "shard": 0, "page": 1, "batch": "feeds_fanout.b' + "0" * 24 + '"}', "bad batch"),
        ('{"run": 7, "shard": 0, "page": 1, "batch": "backfill.bXYZ"}', "bad batch"),
        ('{"run": 0, "end": true}', "run must be an int >= 1"),
        ('{"run": 7, "shard": 0, "page": 1, "more": 1}', "unknown ['more']"),
    ):
        with pytest.raises(InvalidPageJob, match=re.escape(message)):
            parse_job(bad)


def test_progress_rates_over_the_last_minute_and_time_left() -> None:
    base: dict[str, Any] = {"total_pages": 100, "users_done": 0, "cells": 0, "ended": None, "paused": False}
    # 40 pages in the last minute of a 10-minute-old run: 40/60 pages/s, 60 left -> 90 s.
    p = progress(pages_done=40, recent_pages=40, recent_users=4000, started_ms=0, now_ms=600_000, **base)
    assert p.pages_per_s == pytest.approx(40 / 60) and p.users_per_s == pytest.approx(4000 / 60)
    assert p.eta_s == pytest.approx(90) and p.state == "running" and p.fraction == 0.4
    # A run 20 s old is measured over its 20 s.
    young = progress(pages_done=10, recent_pages=10, recent_users=10, started_ms=0, now_ms=20_000, **base)
    assert young.pages_per_s == pytest.approx(0.5) and young.eta_s == pytest.approx(180)
    # Too early to say; nothing done lately; paused; finished.
    assert progress(pages_done=0, recent_pages=0, recent_users=0, started_ms=0, now_ms=500, **base).eta_s is None
    assert progress(pages_done=5, recent_pages=0, recent_users=0, started_ms=0, now_ms=90_000, **base).eta_s is None
    paused = progress(pages_done=40, recent_pages=40, recent_users=1, started_ms=0, now_ms=600_000,
                      **{**base, "paused": True})
    assert paused.state == "paused" and paused.eta_s is None
    done = progress(pages_done=100, recent_pages=3, recent_users=1, started_ms=0, now_ms=600_000,
                    **{**base, "ended": "finished"})
    assert (done.state, done.eta_s, done.pages_per_s, done.fraction) == ("finished", 0.0, None, 1.0)
    # A run that ended with pages not done (cancelled, failed) says so, with nothing left to wait for.
    cut = progress(pages_done=40, recent_pages=3, recent_users=1, started_ms=0, now_ms=600_000,
                   **{**base, "ended": "cancelled"})
    assert (cut.state, cut.eta_s, cut.pages_per_s, cut.fraction) == ("cancelled", 0.0, None, 0.4)
    assert [format_duration(s) for s in (None, 4.4, 75, 7322)] == ["unknown", "4s", "1m 15s", "2h 02m"]


def test_the_report_line_and_the_text_bar() -> None:
    run = Run(7, "feeds", "standby", Plan(500, {0: 4}), "running", 0, None)
    p = progress(pages_done=1, total_pages=4, users_done=500, cells=1200, recent_pages=1, recent_users=500,
                 started_ms=0, now_ms=60_000, ended=None, paused=False)
    line = describe(run, p)
    assert line.startswith("run 7  feeds -> standby  running  1/4 pages (25%)  ")
    assert "users 500  cells 1,200" in line and "left 3m 00s" in line
    assert text_bar(0.5, 10) == "[#####.....]" and text_bar(0, 4) == "[....]" and text_bar(1, 2) == "[##]"


def test_kinds_by_name_and_differences_compared_without_their_round_mark() -> None:
    assert "feeds" in kinds.names() and kinds.get("feeds").name == "feeds"
    with pytest.raises(kinds.UnknownKind, match=r"unknown backfill kind 'nope' \(known: .*feeds"):
        kinds.get("nope")
    first = Difference(1, "missing pin 2", ("missing", "q", 5))
    again = Difference(1, "missing pin 2", ("missing", "q", 5), seen_before=True)
    assert first == again and again in {first} and Difference(1, "x", ("extra", "q", 5)) != first


@pytest.mark.parametrize(("max_running", "width"), [(1, 1), (3, 1), (None, None)])
def test_a_page_writes_one_call_at_a_time_under_the_queues_cap(
        monkeypatch: pytest.MonkeyPatch, max_running: int | None, width: int | None) -> None:
    from types import SimpleNamespace

    from pinlater.queue_config import QueueConfig
    from tasks.backfill import tasks as backfill_tasks
    from tasks.backfill.pages import PageStep
    from tasks.hbase import thrift2

    widths: list[int | None] = []

    def run_page(ctx: object, records: object, job: PageJob) -> PageStep:
        widths.append(thrift2._width.get())
        return PageStep(cells=5, skipped=False, next_job=None, next_key=None, finished_run=False)

    monkeypatch.setattr(backfill_tasks, "runtime", lambda: SimpleNamespace(ctx=None, records=None))
    monkeypatch.setattr(backfill_tasks, "run_page", run_page)
    monkeypatch.setattr(backfill_tasks, "queue_config",
                        lambda client, name: QueueConfig(name, max_running=max_running))
    assert backfill_tasks.page.run(PageJob(7, 0, 2).to_json()) == 5
    assert widths == [width] and thrift2._width.get() is None  # the block's width only
