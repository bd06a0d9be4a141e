"""The consistency model's world: the real stores, the job service (in the
process, or through a ``pinlater server``), a Celery app whose tasks run
in this process as step-by-step threads (``tests.consistency.steps``), and
a scheduler that claims their jobs and runs them in whatever order the
model picks.

Every call a task makes to HBase, MySQL or the job service is a point of
``steps``; an HBase cluster can be taken down (its calls fail as an outage
would, and the jobs are retried on their queue's policy).
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, current_app

import tasks.backfill.runtime as backfill_runtime
import tasks.feeds.runtime as feed_runtime
import tasks.runtime as task_runtime
import tasks.typeahead.runtime as typeahead_runtime
from bench.support import HBaseAdmin
from pinlater.client_api import PinLaterClient
from pinlater.errors import QueueNotFound
from pinlater.models import Ack, DequeuedJob
from pinlater.retry import RetryPolicy
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from tasks.appdata import store as appdata_store
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.backfill.kinds import BackfillContext
from tasks.feeds import queues as feed_queues
from tasks.feeds.actions import FeedActions
from tasks.feeds.cells import TABLE as FEED_TABLE
from tasks.feeds.settings import FeedSettings
from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool, HBaseUnavailable
from tasks.hbase.tables import apply_table, installed_tables
from tasks.shell import OUTAGES
from tasks.typeahead import queues as typeahead_queues
from tasks.typeahead.actions import ContactActions
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.service import ContactsServer
from tasks.typeahead.settings import TypeaheadSettings
from tests.consistency import steps
from tests.support.appdata import ENV as APPDATA_ENV
from tests.support.hbase import test_settings
from tests.support.stores import settings_for
from tests.workers.harness import worker_env
from workers import message_format, registry
from workers.app import make_app
from workers.task import JobRefused, PinLaterTask

QUEUES = (*feed_queues.ALL, *typeahead_queues.ALL)
SOURCE = "consistency-model"
# Every failure is retried at once: the model decides when a job runs again.
RETRY_NOW = RetryPolicy(kind="constant", retries=999, base_ms=0)
TASK_MODULES = ("tasks.feeds.tasks", "tasks.typeahead.tasks")
# The cap of trim jobs and, as the feed table's attribute, of the trimming
# coprocessor: small, so a few pins cross it.
TRIM_CAP = 2


class Faults:
    """Which clusters are down."""

    def __init__(self) -> None:
        self.down: set[str] = set()

    def check(self, pool: ClusterPool, operation: str) -> None:
        if pool.name in self.down:
            raise HBaseUnavailable(pool.name, str(pool.address), operation, "cluster down (consistency model)")


def _gate_pool(pool: ClusterPool, faults: Faults) -> None:
    """Every call of this pool (Thrift1 reads, Thrift2 writes and versioned
    reads) is a point, and fails while its cluster is down."""
    for target in (pool, pool.thrift2):
        original = target.run

        def run(operation: str, fn: Callable[[Any], Any], *, _original: Any = original, **options: Any) -> Any:
            steps.point(f"hbase {pool.name}: {operation[:80]}")
            faults.check(pool, operation)
            return _original(operation, fn, **options)

        target.run = run  # type: ignore[method-assign]


def _gate_store(store: AppData) -> None:
    original = store.run

    def run(shard: int, work: Callable[[Any, str], Any]) -> Any:
        steps.point(f"mysql shard {shard}")
        return original(shard, work)

    store.run = run  # type: ignore[method-assign]


@contextlib.contextmanager
def _gated_publishes() -> Iterator[None]:
    original = PinLaterTask.apply_async

    def apply_async(self: PinLaterTask, *args: Any, **kwargs: Any) -> Any:
        steps.point(f"publish {self.name}")
        return original(self, *args, **kwargs)

    PinLaterTask.apply_async = apply_async  # type: ignore[method-assign]
    try:
        yield
    finally:
        PinLaterTask.apply_async = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _skewed_clocks() -> Iterator[None]:
    """Every task module's clock is its thread's (``steps.now_ms``): a job
    run may be a worker whose clock is off the application's."""
    patched = [module for name, module in list(sys.modules.items())
               if name.startswith("tasks.") and name != appdata_store.__name__
               and getattr(module, "now_ms", None) is appdata_store.now_ms]
    for module in patched:
        module.now_ms = steps.now_ms  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.now_ms = appdata_store.now_ms  # type: ignore[attr-defined]


@dataclass
class Claimed:
    queue: str
    job: DequeuedJob
    runs: int = 0  # times started

    @property
    def key(self) -> tuple[str, str]:
        """An order that replays: the queue and the task's arguments (not
        the ids Celery makes up for every message)."""
        stored = message_format.decode(self.job.body)
        return self.queue, (self.job.body.decode("utf-8", "replace") if stored is None
                            else stored.body.decode("utf-8", "replace"))


@dataclass
class Active:
    run: steps.Run
    claimed: Claimed | None  # None: work of the model itself (a backfill page, a verify pass)
    retry: Callable[[], Any] | None = None  # how a pseudo job runs again after an outage


@dataclass
class Rig:
    """Made once per test session and backend; ``Model`` examples share it."""

    backend: str
    store: AppData  # the oracle's and the application's: not gated
    pair: ClusterPair  # the oracle's: not gated, never down
    service: JobService
    client: PinLaterClient
    app: Celery
    feed_settings: FeedSettings
    typeahead_settings: TypeaheadSettings
    faults: Faults
    feeds: FeedActions
    contacts: ContactActions
    ctx: BackfillContext  # the tasks' stores, for backfill and verify work
    waiting: list[Claimed] = field(default_factory=list)
    active: list[Active] = field(default_factory=list)
    pseudo_waiting: list[tuple[str, Callable[[], Any]]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    broken: bool = False  # a run failed in a way the model does not expect: the example's report
    max_skew_ms: int = 0  # how far off the machine's clock the drain's runs may be, either way
    admins: dict[str, HBaseAdmin] = field(default_factory=dict)
    contacts_service: ContactsServer | None = None  # the typeahead's jobs write through it ("+contacts")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.broken = True
            raise

    # -- HBase's own work -----------------------------------------------------------
    def compact(self, cluster: str, *, major: bool) -> None:
        """A flush of the feed table on ``cluster`` (a new store file; HBase
        may start a minor compaction), or a major compaction: both run the
        trimming coprocessor's hooks, between two store calls of the jobs."""
        if cluster not in self.admins:
            self.admins[cluster] = HBaseAdmin(cluster)
        table = self.pair[cluster].table_name(FEED_TABLE)
        with self._guard():
            (self.admins[cluster].major_compact if major else self.admins[cluster].flush)(table)

    # -- the job service ---------------------------------------------------------
    def reset_queues(self) -> None:
        for name in QUEUES:
            with contextlib.suppress(QueueNotFound):
                self.service.delete_queue(name, "secret")
            self.service.create_queue(name, retry=RETRY_NOW, claim_timeout_ms=3_600_000)

    def claim(self) -> int:
        """Every due job of every queue, claimed by the model."""
        with self._guard():
            return self._claim()

    def _claim(self) -> int:
        found: list[Claimed] = []
        for queue in QUEUES:
            found += [Claimed(queue, job) for job in self.client.dequeue(queue, 1000, source=SOURCE)]
        self.waiting += sorted(found, key=lambda c: c.key)
        return len(found)

    def _ack(self, claimed: Claimed, ok: bool) -> None:
        ack = [Ack(claimed.job.descriptor)]
        if ok:
            self.client.ack(claimed.queue, succeeded=ack, source=SOURCE)
        else:
            self.client.ack(claimed.queue, failed=ack, source=SOURCE)

    # -- running work -------------------------------------------------------------
    def _execute(self, claimed: Claimed) -> Callable[[], Any]:
        stored = message_format.decode(claimed.job.body)
        if stored is None:
            name, args, kwargs = registry.task_for_queue(claimed.queue), [claimed.job.body], {}
        else:
            name = stored.headers["task"]
            args, kwargs, _embed = json.loads(stored.body)
        task = self.app.tasks[name]
        return self._in_app(lambda: task(*args, **kwargs))

    def _in_app(self, work: Callable[[], Any]) -> Callable[[], Any]:
        """``work`` with this app current in its thread (Celery's current app
        is per thread: the tasks' publishes must reach this app's broker)."""

        def run() -> Any:
            self.app.set_current()
            return work()

        return run

    def start(self, index: int, skew_ms: int = 0) -> Active | None:
        """Starts a claimed job (a second run of one already running if
        ``index`` falls on it: a worker that took it over after a claim
        timeout), on a worker whose clock is ``skew_ms`` off; None when
        nothing is claimed."""
        everything = self.waiting + [a.claimed for a in self.active if a.claimed is not None]
        if not everything:
            return None
        claimed = everything[index % len(everything)]
        if claimed in self.waiting:
            self.waiting.remove(claimed)
        claimed.runs += 1
        run = steps.Run(f"{claimed.queue}#{claimed.runs}", self._execute(claimed), skew_ms)
        self.log.append(f"start {run.name} {claimed.key[1][:120]}" + (f" clock {skew_ms:+d} ms" if skew_ms else ""))
        active = Active(run, claimed)
        self.active.append(active)
        with self._guard():
            run.start()
            self._settle(active)
        return active

    def start_pseudo(self, name: str, work: Callable[[], Any], skew_ms: int = 0) -> Active:
        active = Active(steps.Run(name, self._in_app(work), skew_ms), None, work)
        self.active.append(active)
        with self._guard():
            active.run.start()
            self._settle(active)
        return active

    def step(self, index: int, count: int = 1) -> None:
        if not self.active:
            return
        active = self.active[index % len(self.active)]
        with self._guard():
            for _ in range(count):
                active.run.step()
            self._settle(active)

    def finish(self, index: int) -> None:
        if self.active:
            active = self.active[index % len(self.active)]
            with self._guard():
                active.run.finish()
                self._settle(active)

    def crash(self, index: int) -> None:
        if self.active:
            active = self.active[index % len(self.active)]
            with self._guard():
                active.run.crash()
                self._settle(active)

    def _settle(self, active: Active) -> None:
        """What happens once a run ended: the ACK, or the job back with the
        model (a crash: the claim is still ours, so it can run again)."""
        run = active.run
        if run.live:
            return
        self.active.remove(active)
        claimed = active.claimed
        still_running = claimed is not None and any(a.claimed is claimed for a in self.active)
        if run.state == "failed" and not isinstance(run.error, OUTAGES):
            if isinstance(run.error, JobRefused):
                raise AssertionError(f"{run.name} refused its body: {run.error}") from run.error
            raise AssertionError(f"{run.name} failed: {type(run.error).__name__}: {run.error}") from run.error
        if claimed is None:
            if run.state != "done":  # an outage or a crash: it runs again later, as a retried job would
                assert active.retry is not None
                self.pseudo_waiting.append((run.name, active.retry))
            return
        if still_running:
            return  # the other run ACKs
        if run.state == "crashed":
            self.waiting.append(claimed)
        else:
            self._ack(claimed, ok=run.state == "done")

    def run_now(self, index: int, skew_ms: int = 0) -> None:
        """A waiting job from start to end."""
        if not self.waiting:
            return
        active = self.start(index % len(self.waiting), skew_ms)
        if active is not None and active.run.live:
            with self._guard():
                active.run.finish()
                self._settle(active)

    # -- the end of an example ---------------------------------------------------
    def drain(self, order: int, limit: int = 200) -> None:
        """Clusters back, every run finished, then every job until no queue
        has one pending or running; ``order`` seeds the order they run in."""
        self.faults.down.clear()
        pick = random.Random(order)

        def skew() -> int:
            return pick.randint(-self.max_skew_ms, self.max_skew_ms)

        for _ in range(limit):
            while self.active:
                self.finish(pick.randrange(len(self.active)))
            while self.pseudo_waiting:
                name, work = self.pseudo_waiting.pop(pick.randrange(len(self.pseudo_waiting)))
                self.start_pseudo(name, work, skew())
                self.finish(len(self.active) - 1)
            self.claim()
            if not self.waiting and self.idle():
                return
            while self.waiting:
                self.run_now(pick.randrange(len(self.waiting)), skew())
        raise AssertionError(f"the queues did not drain in {limit} rounds: {self.counts()}")

    def counts(self) -> dict[str, tuple[int, int]]:
        return {q: (self.service.count(q, "pending"), self.service.count(q, "running")) for q in QUEUES}

    def idle(self) -> bool:
        return all(p == 0 and r == 0 for p, r in self.counts().values())

    def abandon(self) -> None:
        """After a failed example: end every run and forget every claim."""
        self.faults.down.clear()
        for active in list(self.active):
            with contextlib.suppress(BaseException):
                active.run.finish()
        self.active.clear()
        self.waiting.clear()
        self.pseudo_waiting.clear()


@contextlib.contextmanager
def rig(backend: str, store: AppData, pair: ClusterPair, thrift_address: str | None,
        feed_env: dict[str, str]) -> Iterator[Rig]:
    """The world of one backend ("redis", or "redis" through the Thrift
    server at ``thrift_address``; "redis+contacts": the typeahead's jobs
    write the index through a Contacts Service, in this process on the
    jobs' own gated stores, each of its calls one step of a schedule)."""
    env = worker_env("redis", f"consistency{id(store) % 10**6}:")
    if thrift_address is not None:
        env["PINLATER_SERVERS"] = thrift_address
    env.update(APPDATA_ENV)
    env.update(feed_env)
    feed_settings = FeedSettings.from_env(env)
    typeahead_settings = TypeaheadSettings.from_env(env)
    service = JobService.from_settings(settings_for("redis"), source=SOURCE)
    client: PinLaterClient = service
    if thrift_address is not None:
        client = ThriftClient([thrift_address], source=SOURCE)
    options = {"pinlater_env": {k: v for k, v in env.items() if k.startswith("PINLATER_")},
               "bus_prefix": env["PINLATER_BUS_PREFIX"]}
    app = make_app(f"consistency_{backend.replace('+', '_')}", transport_options=options, imports=TASK_MODULES)
    for module in TASK_MODULES:
        __import__(module)
    app.finalize(auto=True)
    faults = Faults()
    task_store = AppData(AppDataSettings.from_env(env))
    task_pair = ClusterPair.from_settings(test_settings())
    _gate_store(task_store)
    for pool in task_pair:
        _gate_pool(pool, faults)
    contacts = None
    if backend.endswith("+contacts"):
        writer = typeahead_runtime.TypeaheadRuntime(typeahead_settings, task_store, task_pair)
        for cluster in (PRIMARY, STANDBY):
            writer.ready(cluster)
        contacts = ContactsServer(ContactsIndex(task_pair, typeahead_settings).lookup, "127.0.0.1", 0,
                                  writer=writer).start()
        env["PINLATER_TYPEAHEAD_SERVICE"] = f"127.0.0.1:{contacts.port}"
    shared = task_runtime.TaskRuntime(task_store, task_pair, env)
    ctx = backfill_runtime.runtime(shared).ctx
    # Ensured here, outside any job thread: ``EnsuredTables`` holds a lock
    # across its first calls, and a job parked there would stop every other.
    for cluster in (PRIMARY, STANDBY):
        feed_runtime.runtime(shared).ready(cluster)
        typeahead_runtime.runtime(shared).ready(cluster)
        for table in installed_tables():
            ctx.ready(cluster, table)
    for pool in pair:  # compactions trim to the trim jobs' cap (restored below: later tests share the table)
        apply_table(pool, feed_table(TRIM_CAP))
    feeds = FeedActions(store, client, feed_settings)
    admins: dict[str, HBaseAdmin] = {}
    previous_app = current_app._get_current_object()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(task_runtime.replaced(shared))
            stack.enter_context(_gated_publishes())
            stack.enter_context(_skewed_clocks())
            app.set_current()
            the_rig = Rig(backend, store, pair, service, client, app, feed_settings, typeahead_settings, faults,
                          feeds, ContactActions(store, client, feeds=feeds), ctx, admins=admins,
                          contacts_service=contacts)
            the_rig.reset_queues()
            yield the_rig
    finally:
        for pool in pair:
            apply_table(pool, FOLLOWING_FEED)
        for admin in admins.values():
            admin.close()
        previous_app.set_current()
        if contacts is not None:
            contacts.stop(grace_s=5)
        task_store.close()
        task_pair.close()
        if client is not service:
            client.close()
        service.close()
