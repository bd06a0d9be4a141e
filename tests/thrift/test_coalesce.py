"""The server's coalescer (pinlater.thrift.coalesce): concurrent enqueues,
dequeues and ACKs of a queue merged into one shard call, each caller
getting what it would have got alone.

The first half drives a ``Coalescer`` directly over the memory backend,
holding the first shard call of a kind until the calls under test wait
behind it, so that exactly those are merged. The second half goes through
a real server on Redis and MySQL with concurrent clients."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pinlater import Ack, Checkpoint, Job, JobState
from pinlater.engine.groupcommit import GroupCommit
from pinlater.errors import (
    AckNotApplied,
    EnqueueRejected,
    InvalidRequest,
    NoHealthyShards,
    PinLaterError,
    PriorityNotSupported,
    ShardConnectionFailed,
)
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.thrift import coalesce
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.coalesce import Coalescer
from pinlater.thrift.handler import Handler
from pinlater.thrift.server import ThriftServer
from tests.support.stores import settings_for
from tests.thrift.conftest import make_service


# -- helpers -------------------------------------------------------------------------------
class Hold:
    """Wraps one function of the service or the coalescer's module: its
    first call waits until released; every call's arguments are recorded."""

    def __init__(self, owner: object, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = getattr(owner, name)
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.running = threading.Event()
        self.release = threading.Event()
        self.fail_on: Callable[[tuple[Any, ...], dict[str, Any]], BaseException | None] = lambda a, k: None
        monkeypatch.setattr(owner, name, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        if len(self.calls) == 1:
            self.running.set()
            assert self.release.wait(10)
        error = self.fail_on(args, kwargs)
        if error is not None:
            raise error
        return self.real(*args, **kwargs)


class Caller(threading.Thread):
    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 -- the test looks at it
            self.error = exc

    def result(self) -> Any:
        self.join(10)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
        return self.value


def waiting(gc: GroupCommit[Any, Any, Any]) -> int:
    with gc._lock:
        return sum(len(state.waiting) for state in gc._busy.values())


def behind(hold: Hold, gc: GroupCommit[Any, Any, Any], first: Callable[[], Any],
           *calls: Callable[[], Any]) -> tuple[Caller, list[Caller]]:
    """``first`` held in its shard call, then ``calls`` started one by one,
    each queued behind it before the next starts (those that fail their
    checks never queue)."""
    head = Caller(first)
    head.start()
    assert hold.running.wait(10)
    started = []
    for fn in calls:
        before = waiting(gc)
        c = Caller(fn)
        c.start()
        deadline = time.monotonic() + 10
        while waiting(gc) == before and c.is_alive():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        started.append(c)
    return head, started


@pytest.fixture
def svc(memory_service: JobService) -> JobService:
    return memory_service


@pytest.fixture
def co(svc: JobService) -> Coalescer:
    return Coalescer(svc, acks=True)


# -- enqueue ---------------------------------------------------------------------------------
def test_enqueues_merge_bad_input_fails_alone_and_descriptors_go_to_their_callers(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    hold = Hold(coalesce, "store_items", monkeypatch)
    head, calls = behind(
        hold, co.enqueues,
        lambda: co.enqueue(queue_name, [Job(b"h")]),
        lambda: co.enqueue(queue_name, [Job(b"a1"), Job(b"a2", priority=3)]),
        lambda: co.enqueue(queue_name, [Job(b"ok"), Job(b"bad", priority=9)]),  # refused before merging
        lambda: co.enqueue(queue_name, [Job(b"")]),  # refused before merging
        lambda: co.enqueue(queue_name, [Job(b"c1")]),
    )
    hold.release.set()
    assert len(head.result()) == 1
    with pytest.raises(PriorityNotSupported):
        calls[1].result()
    with pytest.raises(EnqueueRejected):
        calls[2].result()
    a, c = calls[0].result(), calls[3].result()
    assert [len(args[2]) for args, _ in hold.calls] == [1, 3]  # h alone, then a1 a2 c1 as one call
    found = svc.lookup([*a, *c], include_body=True)
    assert [found[d].body for d in a] == [b"a1", b"a2"] and found[c[0]].body == b"c1"
    assert [d.split(":")[2] for d in a] == ["p1", "p3"]
    assert svc.count(queue_name, "pending") == 4


def test_a_shard_error_fails_every_caller_of_that_batch_only(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    hold = Hold(coalesce, "store_items", monkeypatch)
    hold.fail_on = lambda args, kwargs: NoHealthyShards("no shard accepted") if len(args[2]) == 2 else None
    head, calls = behind(hold, co.enqueues, lambda: co.enqueue(queue_name, [Job(b"h")]),
                         lambda: co.enqueue(queue_name, [Job(b"x")]), lambda: co.enqueue(queue_name, [Job(b"y")]))
    hold.release.set()
    head.result()
    for c in calls:
        with pytest.raises(NoHealthyShards, match="no shard accepted"):
            c.result()
    assert len(co.enqueue(queue_name, [Job(b"after")])) == 1  # the queue is not stuck
    assert svc.count(queue_name, "pending") == 2


def test_enqueue_batches_stay_within_the_jobs_per_call_limit(monkeypatch: pytest.MonkeyPatch,
                                                             queue_name: str) -> None:
    svc = JobService.from_settings(settings_for("memory", max_jobs_per_call=3), source="co-test")
    try:
        co = Coalescer(svc)
        svc.create_queue(queue_name)
        hold = Hold(coalesce, "store_items", monkeypatch)
        head, calls = behind(hold, co.enqueues, lambda: co.enqueue(queue_name, [Job(b"h")]),
                             *[lambda: co.enqueue(queue_name, [Job(b"a"), Job(b"b")]) for _ in range(3)])
        hold.release.set()
        head.result()
        assert all(len(c.result()) == 2 for c in calls)
        assert [len(args[2]) for args, _ in hold.calls] == [1, 2, 2, 2]
    finally:
        svc.close()


def test_idempotent_enqueues_run_alone(svc: JobService, co: Coalescer, queue_name: str) -> None:
    svc.create_queue(queue_name)
    first = co.enqueue(queue_name, [Job(b"x")], idempotency_key="k1")
    assert co.enqueue(queue_name, [Job(b"x")], idempotency_key="k1") == first
    assert co.enqueues.calls == 0


# -- dequeue --------------------------------------------------------------------------------
def test_dequeues_of_one_source_merge_and_split_in_priority_order_within_each_count(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    p3 = svc.enqueue(queue_name, [Job(b"low%d" % i, priority=3) for i in range(4)])
    p1 = svc.enqueue(queue_name, [Job(b"high%d" % i, priority=1) for i in range(3)])
    p2 = svc.enqueue(queue_name, [Job(b"mid%d" % i, priority=2) for i in range(3)])
    hold = Hold(svc, "dequeue", monkeypatch)
    head, calls = behind(
        hold, co.dequeues,
        lambda: co.dequeue(queue_name, 1, source="w1"),
        lambda: co.dequeue(queue_name, 2, source="w1"),
        lambda: co.dequeue(queue_name, 0, source="w1"),  # refused before merging
        lambda: co.dequeue(queue_name, 4, source="w1"),
        lambda: co.dequeue(queue_name, 5, source="w1"),
    )
    hold.release.set()
    got_head = [j.descriptor for j in head.result()]
    with pytest.raises(InvalidRequest):
        calls[1].result()
    a, b, c = ([j.descriptor for j in x.result()] for x in (calls[0], calls[2], calls[3]))
    # One dequeue of 11 after the first: 9 jobs were left, shared out in arrival order.
    assert [args[1] for args, _ in hold.calls] == [1, 11]
    assert got_head == [p1[0]]
    assert a == p1[1:3] and b == [*p2, p3[0]] and c == p3[1:]
    assert len(set(got_head + a + b + c)) == 10
    assert svc.count(queue_name, "running") == 10
    info = svc.lookup(a + c)
    assert all(info[d].claim == "w1" for d in a + c)


def test_dequeues_of_different_sources_or_coverage_do_not_merge(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"j%d" % i) for i in range(6)])
    hold = Hold(svc, "dequeue", monkeypatch)
    head, calls = behind(
        hold, co.dequeues,
        lambda: co.dequeue(queue_name, 1, source="w1"),
        lambda: co.dequeue(queue_name, 1, source="w2"),  # another key: runs at once
        lambda: co.dequeue(queue_name, 1, source="w1", coverage=0.5),  # another key: runs at once
        lambda: co.dequeue(queue_name, 1, source="w1"),  # waits behind the first
        lambda: co.dequeue(queue_name, 1, source="w1"),  # and goes with the one before
    )
    assert calls[0].result() and calls[1].result()  # done while the first is still held
    hold.release.set()
    jobs = [head.result(), *(c.result() for c in calls)]
    assert all(len(j) == 1 for j in jobs)
    assert [(kwargs["source"], kwargs["coverage"], args[1]) for args, kwargs in hold.calls] == [
        ("w1", 1.0, 1), ("w2", 1.0, 1), ("w1", 0.5, 1), ("w1", 1.0, 2)]
    info = svc.lookup([j[0].descriptor for j in jobs])
    assert [info[j[0].descriptor].claim for j in jobs] == ["w1", "w2", "w1", "w1", "w1"]


def test_a_rate_limit_applies_to_the_merged_total(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name, max_dequeue_rate=2.0)  # burst: 1 token
    svc.enqueue(queue_name, [Job(b"j%d" % i) for i in range(5)])
    # No tokens left now: the merged call is refused for all its callers.
    svc.core.rate_limiter.take(svc.queue_config(queue_name), 1)
    hold = Hold(svc, "dequeue", monkeypatch)
    head, calls = behind(hold, co.dequeues, lambda: co.dequeue(queue_name, 1, source="w"),
                         lambda: co.dequeue(queue_name, 1, source="w"), lambda: co.dequeue(queue_name, 1, source="w"))
    hold.release.set()
    outcomes = []
    for c in [head, *calls]:
        c.join(10)
        outcomes.append(type(c.error).__name__ if c.error else len(c.value))
    assert [args[1] for args, _ in hold.calls] == [1, 2]
    assert outcomes[1] == outcomes[2]  # merged: the same answer
    assert svc.count(queue_name, "running") == sum(o for o in outcomes if isinstance(o, int))


# -- ack ---------------------------------------------------------------------------------------
def test_acks_of_several_sources_merge_with_stale_and_bad_ones_routed_to_their_callers(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"j%d" % i) for i in range(6)])
    mine = svc.dequeue(queue_name, 3, source="w1")
    theirs = svc.dequeue(queue_name, 3, source="w2")
    hold = Hold(coalesce, "settle_acks", monkeypatch)
    head, calls = behind(
        hold, co.acks,
        lambda: co.ack(queue_name, succeeded=[Ack(mine[0].descriptor)], source="w1"),
        lambda: co.ack(queue_name, succeeded=[Ack(mine[1].descriptor)], failed=[Ack(theirs[0].descriptor)],
                       source="w1"),  # theirs[0]: stale for w1
        lambda: co.ack(queue_name, succeeded=[Ack("other_queue:sm1:p1:1")], source="w2"),  # refused
        lambda: co.ack(queue_name, failed=[Ack(theirs[1].descriptor, retry_delay_ms=60_000)],
                       succeeded=[Ack(theirs[2].descriptor)], source="w2"),
    )
    hold.release.set()
    assert head.result().acked == [mine[0].descriptor]
    with pytest.raises(InvalidRequest):
        calls[1].result()
    r1, r2 = calls[0].result(), calls[2].result()
    assert len(hold.calls) == 2 and len(hold.calls[1][0][1]) == 2  # two callers in one apply
    assert (r1.acked, r1.stale) == ([mine[1].descriptor], [theirs[0].descriptor])
    assert (r2.acked, r2.stale) == ([theirs[2].descriptor, theirs[1].descriptor], [])
    info = svc.lookup([j.descriptor for j in (*mine, *theirs)])
    assert [info[j.descriptor].state for j in mine] == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.RUNNING]
    assert [info[j.descriptor].state for j in theirs] == [JobState.RUNNING, JobState.PENDING, JobState.SUCCEEDED]


def test_merged_acks_of_one_source_are_each_settled_by_their_own_claim(
    svc: JobService, co: Coalescer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One job, run twice by the same source: the first run's late failure ACK
    # and the second run's own failure ACK merge into one apply, the late one first.
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"x", attempts_allowed=3), Job(b"y")])
    [first] = svc.dequeue(queue_name, 1, source="w")
    [other] = svc.dequeue(queue_name, 1, source="w")
    svc.checkpoint(queue_name, [Checkpoint(first.descriptor, move_to_pending=True, claim=first.claim)], source="w")
    [second] = svc.dequeue(queue_name, 1, source="w")
    d = first.descriptor
    assert second.descriptor == d and second.claim != first.claim
    hold = Hold(coalesce, "settle_acks", monkeypatch)
    head, calls = behind(
        hold, co.acks,
        lambda: co.ack(queue_name, succeeded=[Ack(other.descriptor, claim=other.claim)], source="w"),
        lambda: co.ack(queue_name, failed=[Ack(d, retry_delay_ms=5, claim=first.claim)], source="w"),
        lambda: co.ack(queue_name, failed=[Ack(d, "run 2", retry_delay_ms=60_000, claim=second.claim)], source="w"),
    )
    hold.release.set()
    assert head.result().acked == [other.descriptor]
    late, live = calls[0].result(), calls[1].result()
    assert len(hold.calls) == 2 and len(hold.calls[1][0][1]) == 2  # the two went as one
    assert (late.acked, late.stale) == ([], [d]) and (live.acked, live.stale) == ([d], [])
    info = svc.lookup([d])[d]
    assert (info.state, info.attempts_remaining, info.custom_status) == (JobState.PENDING, 2, "run 2")


def test_a_shard_failing_an_ack_batch_leaves_only_its_callers_acks_unapplied(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = JobService.from_settings(
        settings_for("memory", shards=parse_shards("m1=memory://,m2=memory://")), source="co-test")
    try:
        co = Coalescer(svc, acks=True)
        svc.create_queue(queue_name)
        for _ in range(40):  # each on a shard picked at random
            svc.enqueue(queue_name, [Job(b"x")])
        on: dict[str, list[str]] = {"sm1": [], "sm2": []}
        for j in svc.dequeue(queue_name, 100, source="w"):
            on[j.descriptor.split(":")[1]].append(j.descriptor)
        assert len(on["sm1"]) >= 2 and on["sm2"]

        def down(*args: object, **kwargs: object) -> None:
            raise ShardConnectionFailed("m2 is down")

        monkeypatch.setattr(svc.core.shards.get("m2"), "ack_succeeded", down)
        hold = Hold(coalesce, "settle_acks", monkeypatch)
        head, calls = behind(hold, co.acks,
                             lambda: co.ack(queue_name, succeeded=[Ack(on["sm1"][0])], source="w"),
                             lambda: co.ack(queue_name, succeeded=[Ack(on["sm1"][1])], source="w"),
                             lambda: co.ack(queue_name, succeeded=[Ack(on["sm2"][0])], source="w"))
        hold.release.set()
        ok = calls[0].result()
        with pytest.raises(AckNotApplied) as failed:
            calls[1].result()
        assert head.result().acked == [on["sm1"][0]]
        assert ok.acked == [on["sm1"][1]] and not ok.unapplied
        assert list(failed.value.result.unapplied) == [on["sm2"][0]] and not failed.value.result.acked
        assert "m2 is down" in failed.value.message
        assert len(hold.calls) == 2 and len(hold.calls[1][0][1]) == 2  # the two went as one
    finally:
        svc.close()


def test_acks_riding_on_a_dequeue_are_applied_first(svc: JobService, co: Coalescer, queue_name: str) -> None:
    svc.create_queue(queue_name)
    svc.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    first = co.dequeue(queue_name, 1, source="w")
    second = co.dequeue(queue_name, 1, source="w", succeeded=[Ack(first[0].descriptor)])
    assert svc.lookup([first[0].descriptor])[first[0].descriptor].state is JobState.SUCCEEDED
    assert len(second) == 1 and second[0].descriptor != first[0].descriptor
    with pytest.raises(InvalidRequest):  # a bad riding ACK fails the call before its dequeue
        co.dequeue(queue_name, 1, source="w", succeeded=[Ack("nope")])
    assert svc.count(queue_name, "running") == 1


def test_coalescing_is_on_by_default_and_a_setting_turns_it_off(svc: JobService) -> None:
    assert isinstance(Handler(svc).jobs, Coalescer)
    assert Handler(svc, coalesce=False).jobs is svc
    assert Settings.from_env({"PINLATER_SERVER_COALESCE": "0"}).server_coalesce is False
    assert Settings.from_env({}).server_coalesce is True
    # ACKs are merged only when asked for.
    assert Settings.from_env({}).server_coalesce_acks is False
    assert Settings.from_env({"PINLATER_SERVER_COALESCE_ACKS": "1"}).server_coalesce_acks is True
    assert Handler(svc).jobs.merge_acks is False  # type: ignore[union-attr]
    assert Coalescer(svc, acks=True).merge_acks is True
    off = JobService.from_settings(settings_for("memory", server_coalesce=False), source="off")
    try:
        assert Handler(off).jobs is off
    finally:
        off.close()


# -- through the server, Redis and MySQL ------------------------------------------------------------
@pytest.fixture(params=["redis", "mysql"])
def real_service(request: pytest.FixtureRequest) -> Iterator[JobService]:
    request.getfixturevalue("servers")
    s = make_service(str(request.param), server_coalesce_acks=True)
    yield s
    s.close()


def run_all(workers: list[Callable[[], Any]]) -> list[Any]:
    callers = [Caller(fn) for fn in workers]
    for c in callers:
        c.start()
    return [c.result() for c in callers]


def test_concurrent_clients_through_the_server_exactly_once(
    real_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    server = start_server(real_service)
    handler: Handler = server.handler
    co = handler.jobs
    assert isinstance(co, Coalescer)
    address = [f"127.0.0.1:{server.port}"]
    real_service.create_queue(queue_name)
    per_client, clients = 60, 8

    def enqueuer(n: int) -> Callable[[], list[tuple[str, bytes]]]:
        def run() -> list[tuple[str, bytes]]:
            with ThriftClient(address, source=f"enq-{n}") as c:
                out = []
                for i in range(per_client):
                    body = b"%d-%d" % (n, i)
                    out.append((c.enqueue(queue_name, [Job(body)])[0], body))
                return out
        return run

    enqueued = [pair for part in run_all([enqueuer(n) for n in range(clients)]) for pair in part]
    assert len({d for d, _ in enqueued}) == per_client * clients
    bodies = real_service.lookup([d for d, _ in enqueued], include_body=True)
    assert all(bodies[d].body == body for d, body in enqueued)

    def drainer(source: str) -> Callable[[], list[str]]:
        # Two clients share each source: their dequeues can merge too.
        def run() -> list[str]:
            got: list[str] = []
            acks: list[Ack] = []
            with ThriftClient(address, source=source) as c:
                while True:
                    jobs = c.dequeue(queue_name, 1, succeeded=acks)
                    acks = [Ack(j.descriptor) for j in jobs]
                    if not jobs:
                        return got
                    got += [j.descriptor for j in jobs]
        return run

    drained = [d for part in run_all([drainer(f"drain-{n % 4}") for n in range(clients)]) for d in part]
    counts = Counter(drained)
    assert set(counts) == {d for d, _ in enqueued} and max(counts.values()) == 1
    assert real_service.count(queue_name, "succeeded") == per_client * clients
    assert real_service.count(queue_name, "running") == 0 and real_service.count(queue_name, "pending") == 0
    # The calls went through the coalescer (merging itself depends on timing).
    assert co.enqueues.calls == per_client * clients and co.acks.calls >= per_client * clients - clients


def test_per_caller_errors_through_the_server(
    real_service: JobService, start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    server = start_server(real_service)
    address = [f"127.0.0.1:{server.port}"]
    real_service.create_queue(queue_name)
    rounds = 30

    def good(n: int) -> Callable[[], int]:
        def run() -> int:
            with ThriftClient(address, source=f"good-{n}") as c:
                return sum(len(c.enqueue(queue_name, [Job(b"ok")])) for _ in range(rounds))
        return run

    def bad() -> int:
        refused = 0
        with ThriftClient(address, source="bad") as c:
            for i in range(rounds):
                try:
                    c.enqueue(queue_name, [Job(b"bad", priority=7)] if i % 2 else [Job(b"")])
                except (PriorityNotSupported, EnqueueRejected):
                    refused += 1
                try:
                    c.ack(queue_name, succeeded=[Ack("other_queue:sr1:p1:1")])  # another queue
                except PinLaterError as exc:
                    assert "is not in queue" in exc.message
                    refused += 1
        return refused

    results = run_all([good(0), good(1), good(2), bad])
    assert results == [rounds, rounds, rounds, 2 * rounds]
    assert real_service.count(queue_name, "pending") == 3 * rounds
