"""The feed tasks end to end: Celery worker processes running
``tasks.feeds.tasks`` on PinLater (in-process stores, or through a
``pinlater server`` for "+thrift"), the session's app-data databases and
HBase tables, and ``FeedActions`` in the test process enqueuing through the
same kind of client the workers use.

The feed queues have fixed names, so a world deletes them first and creates
them with test-sized configs (claim timeout 3 s, retries every 200 ms to
1 s), as an operator may; nothing else shares them within a session."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinlater.client_api import PinLaterClient
from pinlater.errors import QueueNotFound
from pinlater.kit.apps import apps
from pinlater.kit.tls import ClientTls
from pinlater.models import JobInfo
from pinlater.operators import Monitor
from pinlater.retry import RetryPolicy
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.thrift.client import ThriftClient
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tasks.feeds.actions import FeedActions
from tasks.feeds.local import feed_counts, jobs_left
from tasks.feeds.settings import FeedSettings
from tasks.feeds.writes import WriteBody
from tasks.hbase import ClusterPair
from tasks.typeahead import queues as typeahead_queues
from tasks.typeahead.actions import ContactActions
from tests.servers import HBASE_PRIMARY, HBASE_PRIMARY_THRIFT2, HBASE_STANDBY, HBASE_STANDBY_THRIFT2
from tests.support.appdata import ENV as APPDATA_ENV
from tests.support.clocks import skewed_env
from tests.support.hbase import PREFIX as HBASE_PREFIX
from tests.support.stores import settings_for
from tests.support.tls import client_tls_env
from tests.support.waits import wait_progressing
from tests.workers.harness import Processes, worker_args, worker_env
from workers import message_format

FEED_TASKS = "tasks.feeds.tasks"
# Every task module the world's workers run by default, and their queues.
TASK_MODULES = (FEED_TASKS, "tasks.typeahead.tasks")
QUEUES = (*queues.ALL, *typeahead_queues.ALL)
TEST_CLAIM_TIMEOUT_MS = 3000
TEST_RETRY = RetryPolicy(kind="linear_then_exponential", retries=500, base_ms=200, linear_retries=3,
                         max_delay_ms=1000)


def feed_env(stores: str, bus_prefix: str, imports: tuple[str, ...] = TASK_MODULES, **feed: str) -> dict[str, str]:
    env = worker_env(stores, bus_prefix)
    env.update(APPDATA_ENV)
    env.update(
        PINLATER_CELERY_IMPORTS=",".join(imports),
        PINLATER_HBASE_PRIMARY=HBASE_PRIMARY,
        PINLATER_HBASE_STANDBY=HBASE_STANDBY,
        PINLATER_HBASE_PRIMARY_THRIFT2=HBASE_PRIMARY_THRIFT2,
        PINLATER_HBASE_STANDBY_THRIFT2=HBASE_STANDBY_THRIFT2,
        PINLATER_HBASE_TABLE_PREFIX=HBASE_PREFIX,
        PINLATER_HBASE_CALL_TIMEOUT_S="10",
        PINLATER_POLL_INTERVAL_S="0.2",
    )
    env.update({f"PINLATER_FEED_{k.upper()}": v for k, v in feed.items()})
    return env


@dataclass
class FeedWorld:
    env: dict[str, str]
    service: JobService  # the stores, directly: counts and lookups
    client: PinLaterClient  # what the application uses: in-process or Thrift
    actions: FeedActions
    contacts: ContactActions  # the typeahead's actions, follows through ``actions``
    store: AppData
    pair: ClusterPair
    procs: Processes
    workers: list[str] = field(default_factory=list)
    worker_queues: tuple[str, ...] = QUEUES  # what start_workers' workers consume
    # The calls of the Contacts Service the typeahead's jobs write through, by method (None: none).
    contacts_calls: Callable[[], dict[str, int]] | None = None

    def start_workers(self, count: int = 1, concurrency: int = 2, *extra: str,
                      skews_ms: Sequence[int] = (), env: Mapping[str, str] | None = None) -> None:
        """``count`` workers, with ``env`` over the world's; with ``skews_ms``,
        the n-th one's clock is off the machine's by ``skews_ms[n %
        len(skews_ms)]`` (a host of its own)."""
        for i in range(count):
            name = f"feeds{len(self.workers) + 1}"
            own = dict(env or {}, **(skewed_env(skews_ms[i % len(skews_ms)]) if skews_ms else {}))
            self.procs.start(name, worker_args(name, list(self.worker_queues), concurrency, *extra), own)
            self.workers.append(name)

    def counts(self) -> dict[str, dict[str, int]]:
        return feed_counts(self.service, self.worker_queues)

    def busy(self) -> int:
        return jobs_left(self.service, self.worker_queues)

    def settle(self, timeout: float = 120.0, what: str = "the feed queues to drain",
               limit: float | None = None) -> dict[str, dict[str, int]]:
        """Waits until no feed job is pending or running (twice in a row,
        a moment apart: a job may be between its ACK and its successor).

        With ``limit``, ``timeout`` is the longest wait in which no job
        finishes: a backlog that keeps draining on a loaded machine is
        waited for up to ``limit`` seconds in all, a stuck one fails after
        ``timeout``."""
        def quiet() -> bool:
            if self.busy():
                return False
            time.sleep(0.3)
            return self.busy() == 0

        try:
            wait_progressing(quiet, self.finished, timeout, timeout if limit is None else limit, what=what)
        except AssertionError as e:
            logs = "\n".join(f"--- {name}\n{self.procs.log(name)[-3000:]}" for name in self.workers)
            raise AssertionError(f"{e}: {self.counts()}\n{logs}") from None
        return self.counts()

    def finished(self) -> int:
        """How many feed jobs have succeeded or failed: the progress a wait
        on a loaded machine watches."""
        return sum(c["succeeded"] + c["failed"] for c in self.counts().values())

    def failed_jobs(self) -> dict[str, int]:
        return {q: c["failed"] for q, c in self.counts().items() if c["failed"]}

    def statuses(self, queue: str, state: str = "succeeded") -> list[str]:
        """The custom statuses of every job of ``queue`` in ``state``; for
        "pending", those waiting out a retry delay too (a scan of pending
        jobs alone gives the runnable ones)."""
        return [job.custom_status for job in self.jobs(queue, state)]

    def jobs(self, queue: str, state: str = "succeeded", *, include_body: bool = False) -> Iterator[JobInfo]:
        """Every job of ``queue`` in ``state``, as ``statuses`` finds them."""
        for future in (False, True) if state == "pending" else (False,):
            for priority in (1, 2, 3):
                continuation = "0"
                while continuation != "-1":
                    # A write job's body is up to ~40 KB: pages of 100 stay
                    # inside what one scan may return (16 MB by default).
                    result = self.service.scan(queue, state, priority=priority, future=future,
                                               continuation=continuation, limit=100 if include_body else 1000,
                                               include_body=include_body)
                    yield from result.jobs
                    continuation = result.continuation

    def write_rows(self, queue: str) -> list[int]:
        """How many feed rows each succeeded write job of ``queue`` wrote:
        the work one job did, whatever the machine's speed."""
        out = []
        for job in self.jobs(queue, include_body=True):
            message = message_format.decode(job.body or b"")
            assert message is not None, f"{job.descriptor}: not a Celery message"
            args = json.loads(message.body)[0]
            out.append(len(WriteBody.from_json(args[0]).rows))
        return out


def longest_run_ms(statuses: list[str]) -> int:
    """The longest "[ran N ms]" among job statuses (PinLaterRequest writes them)."""
    return max((int(ms) for s in statuses for ms in re.findall(r"\[ran (\d+) ms\]", s)), default=0)


def reset_queues(service: JobService, names: tuple[str, ...] = QUEUES) -> None:
    """The queues made again with test-sized retries and claims, and the
    apps' own caps (their rates are left out: tests run pages faster)."""
    declared = {q.name: q for app in apps() for q in app.queues}
    for name in names:
        with suppress(QueueNotFound):
            service.delete_queue(name, "secret")
    for name in names:
        app = declared.get(name)
        service.create_queue(name, retry=TEST_RETRY, claim_timeout_ms=TEST_CLAIM_TIMEOUT_MS,
                             max_running=None if app is None else app.max_running)


@contextmanager
def feed_world(
    stores: str, thrift_address: str | None, store: AppData, pair: ClusterPair, logdir: Path, *,
    imports: tuple[str, ...] = TASK_MODULES, more_queues: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None, tls: dict[str, ClientTls] | None = None, **feed: Any
) -> Iterator[FeedWorld]:
    """Workers import ``imports`` and consume the feed queues and
    ``more_queues`` (reset like the feed queues), with ``extra_env`` over
    the test settings: other task packages' tests build on this world.
    ``tls``: the "workers" and "app" clients of the Thrift server speak TLS
    with those certificates."""
    tls = tls or {}
    env = feed_env(stores, f"feeds{int(time.time() * 1000) % 10**8}:", imports,
                   **{k: str(v) for k, v in feed.items()})
    env.update(extra_env or {})
    settings: Settings = settings_for(stores)
    worker_queues = QUEUES + more_queues
    with JobService.from_settings(settings, source="feed-tests") as service:
        reset_queues(service, worker_queues)
        client: PinLaterClient = service
        if thrift_address is not None:
            env["PINLATER_SERVERS"] = thrift_address
            if "workers" in tls:
                env |= client_tls_env(tls["workers"])
            client = ThriftClient([thrift_address], source="feed-tests", tls=tls.get("app"))
        actions = FeedActions(store, client, FeedSettings.from_env(env))
        procs = Processes(env, logdir)
        # The world's queues alone: the shards also hold every queue other
        # tests of this process made, and a pass over all of them twice a
        # second was a busy core's worth of calls on a loaded machine.
        monitor = Monitor(service.operators, interval_s=0.5, queues=list(worker_queues))
        monitor.start_thread()
        try:
            contact_actions = ContactActions(store, client, feeds=actions)
            yield FeedWorld(env, service, client, actions, contact_actions, store, pair, procs,
                            worker_queues=worker_queues)
        finally:
            procs.close()
            monitor.stop()
            if client is not service:
                client.close()
