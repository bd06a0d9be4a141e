"""``pinlater-backfill``: start, watch, cancel, pause, resume and verify bulk backfills.

    pinlater-backfill start feeds [--cluster primary|standby|both] [--page-size N] [--rate R]
                                  [--concurrency N|unlimited] [--wait]
    pinlater-backfill status [RUN]
    pinlater-backfill watch RUN
    pinlater-backfill cancel RUN
    pinlater-backfill pause | resume
    pinlater-backfill verify feeds [--cluster ...] [--max-rounds N] [--page-size N]

The app data comes from ``PINLATER_APPDATA_*``, the clusters from
``PINLATER_HBASE_*`` and the job service from ``PINLATER_*`` (the Thrift
servers of ``PINLATER_SERVERS`` when set). Every error is one line on
stderr and exit status 2 (``-v`` shows the traceback); ``verify`` exits 1
when its last round still found differences.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from pinlater.client_api import PinLaterClient
from pinlater.kit.cli_runner import ErrorStyle, command_parser, concurrency_cap, run
from tasks.appdata.store import AppData
from tasks.backfill import kinds, runs
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.plan import DEFAULT_PAGE_SIZE, check_page_size
from tasks.backfill.progress import Progress as RunProgress
from tasks.backfill.progress import format_duration, format_rate
from tasks.backfill.records import ENDED, Records, Run
from tasks.backfill.verify import DEFAULT_MAX_ROUNDS, Round, verify
from tasks.hbase import ClusterPair

WATCH_INTERVAL_S = 1.0
TEXT_BAR_WIDTH = 30


@contextlib.contextmanager
def _client() -> Iterator[PinLaterClient]:
    from pinlater import connect
    from pinlater.settings import Settings

    with connect(Settings.from_env(), source="pinlater-backfill") as client:
        yield client


def describe(run: Run, p: RunProgress) -> str:
    """One line per run: what, where, how far, how fast, how long still."""
    return (f"run {run.id}  {run.kind} -> {run.cluster}  {p.state}  {p.pages_done:,}/{p.total_pages:,} pages "
            f"({p.fraction:.0%})  {format_rate(p.pages_per_s, 'pages')}  {format_rate(p.users_per_s, 'users')}  "
            f"left {format_duration(p.eta_s)}  users {p.users_done:,}  cells {p.cells:,}")


def text_bar(fraction: float, width: int = TEXT_BAR_WIDTH) -> str:
    filled = round(fraction * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def cmd_start(args: argparse.Namespace) -> int:
    with AppData.from_env() as store, _client() as client:
        started = runs.start(store, client, args.kind, runs.CLUSTERS[args.cluster], page_size=args.page_size,
                             rate=args.rate, max_running=args.concurrency)
        for run in started:
            shards = len(run.plan.first_pages())
            print(f"started run {run.id}: {run.kind} on {run.cluster}, {run.total_pages:,} pages of "
                  f"{run.plan.page_size} users on {shards} shard(s)", flush=True)
        if args.wait:
            for run in started:
                _watch(Records(store), client, run.id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with AppData.from_env() as store, _client() as client:
        records, paused = Records(store), runs.queue_paused(client)
        listed = [records.get_run(args.run)] if args.run is not None else records.recent_runs(args.limit)
        if not listed:
            print("no backfill runs yet")
        for run in listed:
            print(describe(run, runs.run_progress(records, run, paused)))
        if paused:
            print("the backfill queue is paused: pinlater-backfill resume")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with AppData.from_env() as store, _client() as client:
        _watch(Records(store), client, args.run)
    return 0


def _watch(records: Records, client: PinLaterClient, run_id: int) -> None:
    """A live bar until the run has ended: rich on a terminal, else a text
    line per change."""
    def poll() -> tuple[Run, RunProgress]:
        run = records.get_run(run_id)
        return run, runs.run_progress(records, run, runs.queue_paused(client))

    run, p = poll()
    console = Console()
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]}"), TextColumn("left {task.fields[left]}"))
        with Progress(*columns, console=console) as bar:
            task = bar.add_task(f"run {run.id} {run.kind} -> {run.cluster}", total=p.total_pages, rate="", left="")
            while True:
                bar.update(task, completed=p.pages_done, rate=f"{format_rate(p.pages_per_s, 'pages')} ({p.state})",
                           left=format_duration(p.eta_s))
                if p.state in ENDED:
                    break
                time.sleep(WATCH_INTERVAL_S)
                run, p = poll()
        return
    last = ""
    while True:
        line = f"{text_bar(p.fraction)} {describe(run, p)}"
        if line != last:
            print(line, flush=True)
            last = line
        if p.state in ENDED:
            return
        time.sleep(WATCH_INTERVAL_S)
        run, p = poll()


def cmd_cancel(args: argparse.Namespace) -> int:
    with AppData.from_env() as store, _client() as client:
        run, result = runs.cancel(store, client, args.run)
    if result is None:
        print(f"run {run.id} had ended already: {run.state}")
    else:
        print(f"run {run.id} cancelled: {len(result.cancelled)} page job(s) will not run, "
              f"{len(result.interrupted)} running told to stop")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with _client() as client:
        runs.pause(client)
    print("backfill queue paused: running pages finish, no new page starts")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with _client() as client:
        runs.resume(client)
    print("backfill queue resumed")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    kind = kinds.get(args.kind)
    clean = True
    with AppData.from_env() as store, contextlib.closing(ClusterPair.from_settings()) as pair:
        ctx = BackfillContext(store, pair)
        for cluster in runs.CLUSTERS[args.cluster]:
            def report(result: Round, cluster: str = cluster) -> None:
                print(f"{kind.name} on {cluster}: round {result.number}: {result.differences:,} differences "
                      f"({result.repaired:,} cells repaired)", flush=True)
                for diff in result.samples:
                    print(f"  user {diff.user_id}: {diff.what}", flush=True)

            with _page_bar(f"verify {kind.name} on {cluster}") as on_page:
                rounds = verify(ctx, kind, cluster, max_rounds=args.max_rounds, page_size=args.page_size,
                                on_page=on_page, on_round=report)
            clean = clean and rounds[-1].differences == 0
            if rounds[-1].differences:
                print(f"{kind.name} on {cluster}: still {rounds[-1].differences:,} differences after "
                      f"{len(rounds)} rounds", flush=True)
    return 0 if clean else 1


@contextlib.contextmanager
def _page_bar(title: str) -> Iterator[Callable[[int, int, int], None]]:
    """A bar over each round's pages on a terminal; nothing otherwise (the
    round lines say enough in a log)."""
    console = Console()
    if not console.is_terminal:
        yield lambda *_: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console) as bar:
        tasks: dict[int, object] = {}

        def on_page(number: int, done: int, total: int) -> None:
            if number not in tasks:
                tasks[number] = bar.add_task(f"{title}: round {number}", total=total)
            bar.update(tasks[number], completed=done, total=total)  # type: ignore[arg-type]

        yield on_page


def _positive(text: str) -> int:
    try:
        return check_page_size(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected pages per second, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"rate must be >= 0 pages per second, got {text}")
    return value


def _rounds(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _run_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a run id is a whole number >= 1, got {text!r}")
    return int(text)


# Every failure is one line of its message, exit 2: a backfill's errors are its stores' and its input's.
ERRORS = ErrorStyle(pinlater_error=None, internal=False)


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command_parser(
        "pinlater-backfill", "Bulk backfills as chained, paged PinLater jobs.", verbose="tracebacks on errors"
    )
    clusters = sorted(runs.CLUSTERS)
    p = sub.add_parser("start", help="start a run per cluster on the backfill queue")
    p.set_defaults(fn=cmd_start)
    p.add_argument("kind", help="what to backfill (feeds, ...)")
    p.add_argument("--cluster", choices=clusters, default="both")
    p.add_argument("--page-size", type=_positive, default=DEFAULT_PAGE_SIZE, help="users per page job")
    p.add_argument("--rate", type=_rate, help="set the backfill queue's rate limit (pages/s; 0 pauses)")
    p.add_argument("--concurrency", type=concurrency_cap, default=runs.UNCHANGED, metavar="N|unlimited",
                   help="set the backfill queue's cap on pages running at once")
    p.add_argument("--wait", action="store_true", help="watch the runs until they finish")
    p = sub.add_parser("status", help="progress of one run, or of the recent ones")
    p.set_defaults(fn=cmd_status)
    p.add_argument("run", type=_run_id, nargs="?")
    p.add_argument("--limit", type=_rounds, default=10, help="recent runs shown")
    p = sub.add_parser("watch", help="a live progress bar until the run finishes")
    p.set_defaults(fn=cmd_watch)
    p.add_argument("run", type=_run_id)
    p = sub.add_parser("cancel", help="cancel a run: its waiting pages never run, its running ones stop")
    p.set_defaults(fn=cmd_cancel)
    p.add_argument("run", type=_run_id)
    p = sub.add_parser("pause", help="pause the backfill queue (every run)")
    p.set_defaults(fn=cmd_pause)
    p = sub.add_parser("resume", help="resume the backfill queue")
    p.set_defaults(fn=cmd_resume)
    p = sub.add_parser("verify", help="compare MySQL with HBase for every user, repair, repeat until equal")
    p.set_defaults(fn=cmd_verify)
    p.add_argument("kind")
    p.add_argument("--cluster", choices=clusters, default="both")
    p.add_argument("--max-rounds", type=_rounds, default=DEFAULT_MAX_ROUNDS)
    p.add_argument("--page-size", type=_positive, default=DEFAULT_PAGE_SIZE)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, ERRORS)


if __name__ == "__main__":
    sys.exit(main())
