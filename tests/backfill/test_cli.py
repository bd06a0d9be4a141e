"""``pinlater-backfill`` in this process (``main``, with the world's
environment): a run started and watched to the end, its status, pause and
resume, verify; every error one line on stderr with exit status 2."""

from __future__ import annotations

import re

import pytest

from pinlater.limits import MAX_RUNNING_CAP
from tasks.backfill.cli import main
from tasks.backfill.queue import QUEUE
from tests.backfill.helpers import small_graph
from tests.feeds.world import FeedWorld


@pytest.fixture
def cli(world: FeedWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    for key, value in world.env.items():
        if key.startswith("PINLATER_"):
            monkeypatch.setenv(key, value)

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's errors exit from the parser
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_start_wait_status_pause_resume_and_verify(world: FeedWorld, cli) -> None:  # type: ignore[no-untyped-def]
    small_graph(world.store, seed=31, users=40)
    world.start_workers(1, 4)
    code, out, err = cli("start", "feeds", "--page-size", "10", "--concurrency", "3", "--wait")
    assert (code, err) == (0, "")
    assert world.service.queue_config(QUEUE, fresh=True).max_running == 3
    started = re.findall(r"^started run (\d+): feeds on (primary|standby), (\d+) pages of 10 users on (\d) shard",
                         out, re.M)
    assert [cluster for _, cluster, _, _ in started] == ["primary", "standby"]
    # Not a terminal: a text bar line per change, the last one finished.
    bars = [line for line in out.splitlines() if line.startswith("[")]
    assert bars[-1].startswith("[" + "#" * 30 + "] run ") and " finished " in bars[-1]

    run_id, _, pages, _ = started[0]
    code, out, err = cli("status", run_id)
    assert code == 0 and err == ""
    assert out.startswith(f"run {run_id}  feeds -> primary  finished  {pages}/{pages} pages (100%)")
    assert cli("cancel", run_id) == (0, f"run {run_id} had ended already: finished\n", "")
    assert cli("pause") == (0, "backfill queue paused: running pages finish, no new page starts\n", "")
    code, out, _ = cli("status")
    assert code == 0 and out.splitlines()[-1] == "the backfill queue is paused: pinlater-backfill resume"
    assert len(out.splitlines()) >= 3  # both runs, newest first
    assert cli("resume")[:2] == (0, "backfill queue resumed\n")

    code, out, err = cli("verify", "feeds", "--page-size", "16")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"feeds on {c}: round 1: 0 differences (0 cells repaired)"
                                for c in ("primary", "standby")]


@pytest.mark.parametrize(("argv", "message"), [
    (["start", "nope"], "error: unknown backfill kind 'nope' (known: contacts, feeds, second_degree)"),
    (["status", "999999"], "error: no backfill run 999999"),
    (["cancel", "999999"], "error: no backfill run 999999"),
    (["verify", "nope"], "error: unknown backfill kind 'nope' (known: contacts, feeds, second_degree)"),
    (["start", "feeds", "--page-size", "0"], "error: argument --page-size: page size must be a whole number in "
                                             "1..10000, got 0 (see pinlater-backfill start --help)"),
    (["watch", "x"], "error: argument run: a run id is a whole number >= 1, got 'x' "
                     "(see pinlater-backfill watch --help)"),
    (["start", "feeds", "--concurrency", "0"], f"error: argument --concurrency: '0' is not a concurrency cap: give a "
                                               f"whole number of jobs from 1 to {MAX_RUNNING_CAP}, or 'unlimited' "
                                               "(see pinlater-backfill start --help)"),
    (["start", "feeds", "--cluster", "third"], None),
    (["frobnicate"], None),
])
def test_errors_are_one_line_and_exit_2(cli, argv: list[str], message: str | None) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    if message is not None:
        assert err == message + "\n"


def test_mysql_down_is_one_line(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PINLATER_APPDATA_SHARDS", "0-3=mysql://pinlater:pinlater@127.0.0.1:9")
    code, out, err = cli("status")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: mysql://") or "127.0.0.1:9" in err, err
    assert "Traceback" not in err
