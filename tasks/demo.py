"""The demo of the jobs this system exists for: the whole system on this machine.

Seeds a heavy-tailed graph in sharded MySQL (with a few accounts of
thousands of followers), starts Celery worker processes running the feed,
typeahead and backfill tasks on PinLater (Redis and MySQL shards), loads
every user's typeahead contacts index with a bulk backfill (a progress bar
over its pages), creates pins, follows, renames and address-book imports
through the application API (``FeedActions``, ``ContactActions``) while a
progress bar follows the jobs, then prints a few users' feeds (read with the
speculative reader, joined to the pins in MySQL), what their typeahead
finds, and the counts of jobs by state per queue.

    python -m tasks.demo          # make demo (after scripts/services up)

Each run starts clean: its app-data databases (``appdata_demo_``), HBase
tables (prefix ``demo``) and the installed apps' queues are dropped and made
again. It writes the settings its workers ran on to ``.var/demo.env``, which
``make run`` hands every Procfile process, so they show the demo's jobs.
The demo sits above the apps: the one module that names several of them.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pinlater.demo import DEMO_SECRET, demo_settings, migrate_demo_stores
from pinlater.errors import QueueNotFound
from pinlater.kit import apps
from pinlater.observe import trace_tree, tracing
from pinlater.operators import Monitor
from pinlater.service import JobService
from tasks.appdata import generate, graph, mappings, objects, schema
from tasks.appdata.generate import GraphSpec
from tasks.appdata.ids import ObjectType
from tasks.appdata.names import person_name
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_HAS_BOARDS
from tasks.backfill import runs
from tasks.backfill.records import ENDED, FINISHED, Records
from tasks.feeds.actions import FeedActions
from tasks.feeds.local import REPO, STATES, feed_counts, worker_processes
from tasks.feeds.read import FeedReader
from tasks.feeds.settings import FeedSettings
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, HBaseSettings, drop_table, ensure_tables
from tasks.hbase.tables import installed_tables
from tasks.typeahead import second, truth
from tasks.typeahead.actions import ContactActions
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.wire import connect as contacts_client
from tasks.typeahead.wire import idl as contacts_idl

DEMO_ENV = {
    "PINLATER_APPDATA_DATABASE_PREFIX": "appdata_demo_",
    "PINLATER_HBASE_TABLE_PREFIX": "demo",
    "PINLATER_BUS_PREFIX": "plkdemo:",
    "PINLATER_POLL_INTERVAL_S": "0.2",
}


@dataclass(frozen=True)
class DemoPlan:
    users: int
    celebrity_followers: int
    pins: int
    follows: int
    workers: int
    timeout_s: float


def demo_env() -> dict[str, str]:
    """The workers' environment: the demo's job-service shards, and the demo's
    databases and tables unless the caller's environment names others."""
    settings = demo_settings()
    env = dict(os.environ)
    for key, value in DEMO_ENV.items():
        env.setdefault(key, value)
    env["PINLATER_SHARDS"] = ",".join(f"{s.id}={s.url}" for s in settings.shards)
    env["PINLATER_CONTROL_URL"] = str(settings.control_url)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PINLATER_SERVERS", None)
    return env


# The queues the demo's workers consume (and the demo resets): the installed apps'.
QUEUES = tuple(name for app in apps.apps() for name in app.queue_names)
ENV_FILE = REPO / ".var" / "demo.env"


def write_env_file(env: dict[str, str], path: Path = ENV_FILE) -> None:
    """The settings the demo's processes run on, as ``NAME=value`` lines
    (honcho's ``-e``): the demo's own and the job service's, not the rest of
    the caller's environment."""
    names = sorted({*DEMO_ENV, "PINLATER_SHARDS", "PINLATER_CONTROL_URL"})
    # honcho reads each line as a shell word would be read.
    lines = [f"{name}={shlex.quote(env[name])}" for name in names if env.get(name)]
    # The demo's admin secret: its queues can be changed from the dashboard.
    lines.append(f"PINLATER_ADMIN_SECRET={shlex.quote(DEMO_SECRET)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def reset(service: JobService, store: AppData, pair: ClusterPair) -> None:
    for name in QUEUES:
        with suppress(QueueNotFound):
            service.delete_queue(name, DEMO_SECRET)
    schema.drop_shards(store)
    schema.create_shards(store)
    for pool in pair:
        for table in installed_tables():
            drop_table(pool, table.name)
    ensure_tables(pair, installed_tables())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--celebrity-followers", type=int, default=8_000)
    parser.add_argument("--pins", type=int, default=300, help="pins created through the task path")
    parser.add_argument("--follows", type=int, default=200, help="follows and unfollows through the task path")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (2 pool processes each)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--traces", type=Path, metavar="FILE",
                        help="trace every process to FILE (JSON lines) and print one pin's trace at the end")
    parser.add_argument("--env-file", type=Path, default=ENV_FILE, metavar="FILE",
                        help=f"where to write the demo's settings (default {ENV_FILE.relative_to(REPO)}, "
                             "which make run reads)")
    parser.add_argument("--write-env", action="store_true", help="only write the settings file, run nothing")
    args = parser.parse_args(argv)
    if args.write_env:
        write_env_file(demo_env(), args.env_file)
        return 0
    plan = DemoPlan(args.users, args.celebrity_followers, args.pins, args.follows, args.workers, args.timeout)
    if args.traces is not None:
        trace_to(args.traces)
    try:
        return run(plan, Console(), args.env_file)
    except KeyboardInterrupt:
        return 130


def run(plan: DemoPlan, console: Console, env_file: Path = ENV_FILE) -> int:
    env = demo_env()
    if "PINLATER_TRACES_FILE" in env:
        env["OTEL_SERVICE_NAME"] = "feeds-worker"
    feed_settings = FeedSettings.from_env(env)
    store = AppData(AppDataSettings.from_env(env))
    pair = ClusterPair.from_settings(HBaseSettings.from_env(env))
    rng = random.Random(11)
    logdir = REPO / ".var" / "demo"
    logdir.mkdir(parents=True, exist_ok=True)
    write_env_file(env, env_file)
    migrate_demo_stores()
    with JobService.from_settings(demo_settings(), source="feeds-demo") as service:
        console.print("[bold]Following feeds demo[/]: app data in sharded MySQL, jobs on PinLater "
                      f"({', '.join(service.operators.shard_ids())}), feeds in two HBase clusters")
        reset(service, store, pair)
        started = time.monotonic()
        spec = GraphSpec(users=plan.users, boards=plan.users // 2, pins=0, follows_per_user=6,
                         board_follows_per_user=1, celebrities=3,
                         celebrity_followers=min(plan.celebrity_followers, plan.users - 1), seed=7)
        summary = generate.generate(store, spec)
        console.print(f"seeded {summary.users:,} users, {summary.boards:,} boards, "
                      f"{summary.user_follows + summary.board_follows:,} follows in "
                      f"{time.monotonic() - started:.1f} s; most followed: "
                      + ", ".join(f"{n:,}" for _, n in summary.top_accounts[:3]))

        actions = FeedActions(store, service, feed_settings)
        contacts = ContactActions(store, service, feeds=actions)
        monitor = Monitor(service.operators, interval_s=1.0)
        monitor.start_thread()
        try:
            with worker_processes(env, plan.workers, logdir, name="demo", queue_names=QUEUES):
                ok = all(backfill(console, store, service, kind, plan.timeout_s) for kind in BACKFILLS)
                ok = ok and drive(plan, console, contacts, service, summary.user_ids, summary.celebrity_ids, rng)
        finally:
            monitor.stop()
        show(console, store, pair, feed_settings, service, summary.celebrity_ids, rng)
        if os.environ.get("PINLATER_TRACES_FILE"):
            show_trace(console, Path(os.environ["PINLATER_TRACES_FILE"]))
        store.close()
        pair.close()
        if not ok:
            console.print(f"[red]the feed jobs did not finish within {plan.timeout_s:.0f} s "
                          f"(worker logs: {logdir})[/]")
            return 1
        console.print("[green]every feed job finished[/]")
        return 0


# The typeahead's backfill kinds and what each loads.
BACKFILLS = {"contacts": "typeahead index", "second_degree": "second_degree contacts"}


def backfill(console: Console, store: AppData, service: JobService, kind: str, timeout_s: float) -> bool:
    """The ``kind`` backfill of every user on both clusters (``pinlater-backfill
    start contacts --rate 200 --concurrency unlimited`` does the same), with
    a bar over its pages. A first load: no lookups yet to keep a budget
    for, so neither the backfill queue's default rate nor its cap holds it
    back."""
    started = runs.start(store, service, kind, (PRIMARY, STANDBY), rate=200, max_running=None)
    records = Records(store)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(f"{kind} backfill pages", total=sum(r.total_pages for r in started))
        while time.monotonic() < deadline:
            # The state first: a run ends after its last page's counts, so
            # counts read after it are whole.
            states = [records.get_run(r.id).state for r in started]
            counts = [records.counts(r.id) for r in started]
            progress.update(bar, completed=sum(c.pages_done for c in counts))
            if any(state in ENDED and state != FINISHED for state in states):
                console.print(f"[red]the backfill runs ended {', '.join(states)}[/]")
                return False
            if all(state == FINISHED for state in states):
                users = sum(c.users_done for c in counts) // len(started)
                console.print(f"{BACKFILLS[kind]} loaded for {users:,} users on both clusters "
                              f"in {time.monotonic() - began:.1f} s")
                return True
            time.sleep(0.3)
    return False


def drive(
    plan: DemoPlan, console: Console, contacts: ContactActions, service: JobService,
    users: list[int], celebrities: list[int], rng: random.Random,
) -> bool:
    """Pins, follows, renames and imports through the application API, with
    a bar over the jobs (the total grows as fan-outs chain their pages)."""
    actions = contacts.feeds
    assert actions is not None
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + plan.timeout_s
    renames, imports = plan.follows // 10, plan.follows // 10
    with Progress(*columns, console=console) as progress:
        made = progress.add_task("pins, follows, renames, imports", total=plan.pins + plan.follows + renames + imports)
        jobs = progress.add_task("jobs finished", total=1)
        kinds = ["pin"] * plan.pins + ["follow"] * plan.follows + ["rename"] * renames + ["import"] * imports
        last = 0.0
        rng.shuffle(kinds)
        for kind in kinds:
            if kind == "rename":
                contacts.rename(rng.choice(users), person_name(rng))
            elif kind == "import":
                book = [{"name": person_name(rng), "email": f"friend{rng.randrange(10**6)}@example.com"}
                        for _ in range(5)]
                contacts.connect_source(rng.choice(users), "address_book", book)
            elif kind == "pin":
                # Popular accounts pin more: a third of the pins are theirs.
                pinner = rng.choice(celebrities) if rng.random() < 0.33 else rng.choice(users)
                actions.create_pin(pinner, board_of(actions.store, pinner), {"title": f"pin {rng.randrange(10**6)}"})
            else:
                follower, followee = rng.sample(users, 2)
                if rng.random() < 0.2:
                    contacts.unfollow(follower, followee)
                else:
                    contacts.follow(follower, followee)
            progress.advance(made)
            if time.monotonic() - last > 0.5:  # counting is a few round trips per shard
                update(progress, jobs, service)
                last = time.monotonic()
        while time.monotonic() < deadline:
            if update(progress, jobs, service) == 0:
                time.sleep(0.5)  # a job between its ACK and its successor's enqueue
                if update(progress, jobs, service) == 0:
                    return True
            time.sleep(0.25)
    return False


def update(progress: Progress, task: object, service: JobService) -> int:
    """Refreshes the bar; the jobs still to run."""
    now = feed_counts(service, QUEUES)
    done = sum(c["succeeded"] + c["failed"] for c in now.values())
    todo = sum(c["pending"] + c["running"] for c in now.values())
    progress.update(task, completed=done, total=max(done + todo, 1))  # type: ignore[arg-type]
    return todo


def board_of(store: AppData, user: int) -> int:
    boards = mappings.recent(store, USER_HAS_BOARDS, user, 5)
    if boards:
        return boards[0].to_id
    return graph.create_board(store, user, {"name": "my pins"}).id


def show(
    console: Console, store: AppData, pair: ClusterPair, settings: FeedSettings, service: JobService,
    celebrities: list[int], rng: random.Random,
) -> None:
    reader = FeedReader(pair, store, settings.read_cutoff_ms / 1000, settings.shadow_share)
    try:
        fans = graph.followers_of_user(store, celebrities[0], limit=50).ids
        for user in rng.sample(fans, min(3, len(fans))):
            page = reader.read(user, None, 5)
            total = len(reader.read(user, None, 500).pins)
            names = {u.id: str(u.data.get("name", u.id)) for u in objects.get_many(
                store, [int(p.data["user_id"]) for p in page.pins], ObjectType.USER)}
            console.print(f"[bold]feed of user {user}[/] ({total} pins, newest first, served by the {page.served_by})")
            table = Table()
            for column in ("pin", "pinned by", "created (UTC)", "title"):
                table.add_column(column)
            for pin in page.pins:
                when = time.strftime("%H:%M:%S", time.gmtime(pin.created_at_ms / 1000))
                pinner = names.get(int(pin.data["user_id"]), "?")
                table.add_row(str(pin.id), pinner, when, str(pin.data.get("title", "")))
            console.print(table)
        show_typeahead(console, store, pair, fans[0])
    finally:
        reader.close()
    table = Table(title="jobs by state per queue")
    table.add_column("queue")
    for state in STATES:
        table.add_column(state, justify="right")
    for queue, by_state in feed_counts(service, QUEUES).items():
        table.add_row(queue, *(f"{by_state[s]:,}" for s in STATES))
    console.print(table)


def trace_to(path: Path) -> None:
    """Tracing on, to ``path``, for this process and the workers it starts
    (they inherit the environment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.environ.update(OTEL_TRACES_EXPORTER="pinlater_file", PINLATER_TRACES_FILE=str(path.resolve()),
                      OTEL_SERVICE_NAME="feeds-demo", OTEL_BSP_SCHEDULE_DELAY="500")


def show_trace(console: Console, path: Path, max_lines: int = 40) -> None:
    """The trace of the pin whose fan-out made the most spans, as a tree."""
    tracing.flush()
    with path.open(encoding="utf-8") as f:
        spans = trace_tree.read_spans(f)
    pins = {s["trace_id"]: s["attributes"]["feeds.pin_id"] for s in spans
            if "feeds.pin_id" in (s.get("attributes") or {})}
    if not pins:
        console.print(f"no fan-out traced in {path}")
        return
    sizes = {trace: sum(1 for s in spans if s["trace_id"] == trace) for trace in pins}
    trace_id = max(sizes, key=lambda t: sizes[t])
    lines = trace_tree.render(spans, trace_id)
    console.print(f"[bold]the fan-out of pin {pins[trace_id]}[/], as traced ({len(spans):,} spans in all):")
    console.print("\n".join(lines[:max_lines]), markup=False, highlight=False, soft_wrap=True)
    if len(lines) > max_lines:
        console.print(f"... {len(lines) - max_lines} more: pinlater trace {path} --trace {trace_id}")


def show_typeahead(console: Console, store: AppData, pair: ClusterPair, user: int) -> None:
    """What the typeahead finds for ``user`` as they type one of their contacts' names."""
    entries = truth.entries_of_owners(store, [user])[user]
    if not entries:
        return
    name = entries[0].name
    first, last = name.split(" ")[0], name.split(" ")[-1]
    index = ContactsIndex(pair)
    table = Table(title=f"typeahead of user {user}: typing {name!r}")
    for column in ("typed", "results (source)"):
        table.add_column(column)
    for typed in dict.fromkeys((first[:1], first[:3], f"{first} {last[:1]}")):
        result = index.lookup(user, typed, 5)
        table.add_row(repr(typed), "; ".join(f"{m.contact.name} ({m.source})" for m in result.matches))
    console.print(table)
    # The same index behind the Contacts Service, asked as any Thrift client would.
    server = ContactsServer(index.lookup, "127.0.0.1", 0).start()
    client = contacts_client("127.0.0.1", server.port, timeout_ms=10_000)
    try:
        answer = client.lookup(contacts_idl.LookupRequest(owner=user, query=first[:3], limit=5))
        console.print(f"over Thrift (Contacts Service on 127.0.0.1:{server.port}), {first[:3]!r}: "
                      + "; ".join(f"{m.contact.name} ({m.source})" for m in answer.matches)
                      + f" [answered by the {answer.servedBy}]", markup=False, highlight=False)
        # Someone the user does not follow yet, whom the accounts they follow do.
        listed = second.candidates(pair[PRIMARY], user)
        if listed:
            best = listed[0]
            typed = best.contact.name.split(" ")[0][:3]
            answer = client.lookup(contacts_idl.LookupRequest(owner=user, query=typed, limit=3,
                                                              sources=["second_degree"]))
            console.print(f"over Thrift, second_degree only, {typed!r}: "
                          + "; ".join(f"{m.contact.name} ({m.source})" for m in answer.matches)
                          + f" [{best.contact.name} is followed by {best.weight} of the accounts user {user} "
                          f"follows]", markup=False, highlight=False, soft_wrap=True)
    finally:
        client.close()
        server.stop(grace_s=2)


if __name__ == "__main__":
    raise SystemExit(main())
