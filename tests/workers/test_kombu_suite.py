# mypy: disable-error-code="misc,no-untyped-call"
# (The base classes come from kombu's test module, loaded at run time: Any; Kombu is untyped.)
"""Kombu's own generic transport tests, run as a peer would run them, on
``pinlater://`` over Redis shards and over MySQL shards.

The classes are kombu's ``t/integration/common.py`` of the installed
version, unchanged (``make kombu-suite`` fetches it with pip).
Priorities are ordered as on kombu's Redis transport (0 is the highest).
At the end, a test of our own for each Celery habit users rely on.
Failover URLs name Thrift servers: the live one is a ``pinlater server``
over the same stores. Each store setup is this module's alone, and is
emptied before every test (kombu's tests use fixed queue names).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.message import Message
from kombu.messaging import Consumer, Producer

import workers.app  # noqa: F401  (registers the pinlater:// alias)
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.states import JobState
from tests.servers import REDIS_PORTS, free_port, mysql_url, redis_db, redis_url
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.server_process import ServerProcess
from tests.support.stores import settings_for
from tests.workers import kombu_suite
from workers.channel import EXPIRED_STATUS
from workers.publish_info import take_descriptor
from workers.registry import is_task_queue, job_queue_name

SUITE: Any = kombu_suite.load()
# Many short tests, about a hundred seconds in all, in one process (the
# stores are module fixtures): started among the first.
pytestmark = pytest.mark.slow
# Redis databases only this module uses.
REDIS_SHARD_DB, REDIS_CONTROL_DB = redis_db(13), redis_db(14)


def suite_settings(setup: str) -> Settings:
    if setup == "redis":
        return settings_for(
            "redis", shards=parse_shards(f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}"),
            control_url=redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        )
    return settings_for(
        "mysql", shards=parse_shards(f"d1={mysql_url(MYSQL_DATABASES['kombu_d1'])}"),
        control_url=mysql_url(MYSQL_DATABASES["kombu_ctl"]),
    )


def suite_env(setup: str) -> dict[str, str]:
    settings = suite_settings(setup)
    return {
        "PINLATER_SHARDS": ",".join(f"{s.id}={s.url}" for s in settings.shards),
        "PINLATER_CONTROL_URL": str(settings.control_url),
        "PINLATER_ADMIN_SECRET": "secret",
    }


@pytest.fixture(scope="module", params=["redis", "mysql"])
def setup(request: pytest.FixtureRequest, servers: None) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def empty_stores(setup: str) -> None:
    with JobService.from_settings(suite_settings(setup), source="kombu-suite") as service:
        for queue in service.queue_names():
            service.delete_queue(queue, "secret")


def options(setup: str) -> dict[str, object]:
    return {"pinlater_env": suite_env(setup), "bus_prefix": f"k{uuid.uuid4().hex[:8]}:"}


@pytest.fixture
def connection(setup: str) -> Connection:
    return Connection("pinlater://", transport_options=options(setup))


@pytest.fixture
def invalid_connection() -> Connection:
    # No Thrift server listens there.
    return Connection(f"pinlater://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def live_server(setup: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import os

    env = dict(os.environ, **suite_env(setup))
    env.pop("PINLATER_SERVERS", None)
    log: Path = tmp_path_factory.mktemp("kombu_suite") / f"server-{setup}.log"
    with ServerProcess("--no-monitor", "--grace", "2", env=env, log_path=log, metrics=False) as proc:
        yield proc.address


@pytest.fixture
def failover_connection(setup: str, live_server: str) -> Connection:
    return Connection(
        f"pinlater://127.0.0.1:{free_port()};pinlater://{live_server}", transport_options=options(setup)
    )


class TestBasicFunctionality(SUITE.BasicFunctionality):
    pass


class TestExchangeTypes(SUITE.BaseExchangeTypes):
    pass


class TestTimeToLive(SUITE.BaseTimeToLive):
    pass


class TestPriority(SUITE.BasePriority):
    PRIORITY_ORDER = "desc"


class TestMessage(SUITE.BaseMessage):
    pass


class TestEventLoop(SUITE.BaseEventLoop):
    pass


class TestFailover(SUITE.BaseFailover):
    pass


# -- Celery habits users rely on, one test each (both stores, in-process and Thrift) ---------------------------


@pytest.fixture(params=["in_process", "thrift"])
def via(request: pytest.FixtureRequest, setup: str) -> Connection:
    """The job service in the process, or through a pinlater server."""
    if request.param == "thrift":
        return Connection(f"pinlater://{request.getfixturevalue('live_server')}", transport_options=options(setup))
    return Connection("pinlater://", transport_options=options(setup))


@pytest.fixture
def service(setup: str) -> Iterator[JobService]:
    with JobService.from_settings(suite_settings(setup), source="kombu-suite-checks") as client:
        yield client


def _job(tag: str) -> str:
    """The descriptor of a delivery tag (``DESCRIPTOR/CLAIM``, or the
    descriptor alone: workers/README.md)."""
    return tag.split("/", 1)[0]


def _state(service: JobService, tag: str) -> JobState:
    descriptor = _job(tag)
    return service.lookup([descriptor])[descriptor].state


def test_requeue_reject_and_ack_after_get_reach_the_job_at_once(
    via: Connection, service: JobService
) -> None:
    with via as conn, closing(conn.SimpleQueue("habit_get")) as queue:
        for n in range(3):
            queue.put({"n": n})
        requeued = queue.get_nowait()
        requeued.requeue()
        assert _state(service, requeued.delivery_tag) == JobState.PENDING
        rejected = queue.get_nowait()
        rejected.reject(requeue=True)
        assert _state(service, rejected.delivery_tag) == JobState.PENDING
        acked = queue.get_nowait()
        acked.ack()
        assert _state(service, acked.delivery_tag) == JobState.SUCCEEDED
        # Requeued jobs are claimable again by the very next gets. A release is due now,
        # and in the same millisecond as a publish it may sort before it, so a get can
        # return a requeued job again: only which jobs remain is fixed, not their order.
        again = {_job(queue.get_nowait().delivery_tag) for _ in range(2)}
        with pytest.raises(queue.Empty):
            queue.get_nowait()
        remaining = again | {_job(acked.delivery_tag)}
        assert len(remaining) == 3, "the three jobs, each claimed once after the releases"
        assert {_job(requeued.delivery_tag), _job(rejected.delivery_tag)} <= remaining
        # get() with a timeout consumes (drain_events): its ACK goes out at once too.
        queue.put({"n": 3})
        consumed = queue.get(timeout=2)
        consumed.ack()
        assert _state(service, consumed.delivery_tag) == JobState.SUCCEEDED


def test_a_job_requeued_in_one_drain_is_delivered_by_the_next(via: Connection) -> None:
    queue = Queue("habit_loop", Exchange("habit_loop"), routing_key="habit_loop")
    seen: list[tuple[str, bool]] = []

    def callback(body: object, message: Message) -> None:
        seen.append((message.delivery_tag, message.delivery_info["redelivered"]))
        if len(seen) == 1:
            message.requeue()
        else:
            message.ack()

    with via as conn:
        Producer(conn.default_channel).publish({"x": 1}, exchange=queue.exchange,
                                                      routing_key="habit_loop", declare=[queue])
        with Consumer(conn, [queue], callbacks=[callback], prefetch_count=1):
            conn.drain_events(timeout=2)
            started = time.monotonic()
            conn.drain_events(timeout=2)
            assert time.monotonic() - started < 0.5, "the requeued job waited for a slow poll"
    # The same job, delivered twice: each delivery under a claim of its own.
    assert [_job(tag) for tag, _ in seen] == [_job(seen[0][0])] * 2 and seen[0][0] != seen[1][0]
    assert [redelivered for _, redelivered in seen] == [False, False]  # a release spends no attempt


def test_plain_kombu_headers_come_back_exactly(via: Connection) -> None:
    headers = {"k1": "v1", "n": 3, "nested": {"a": [1, 2]}, "retries": 7}
    with via as conn, closing(conn.SimpleQueue("habit_headers")) as queue:
        queue.put({"hello": "world"}, headers=headers)
        message = queue.get(timeout=2)
        assert message.headers == headers
        message.ack()


def test_an_expired_message_is_not_delivered_and_ends_failed(
    via: Connection, service: JobService
) -> None:
    with via as conn, closing(conn.SimpleQueue("habit_ttl")) as queue:
        queue.put({"late": True}, expiration=0.2)
        expired = take_descriptor()
        queue.put({"late": False}, expiration=60)
        time.sleep(0.4)
        message = queue.get(timeout=2)
        assert message.payload == {"late": False}
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get_nowait()
    assert expired is not None
    info = service.lookup([expired])[expired]
    assert (info.state, info.custom_status) == (JobState.FAILED, EXPIRED_STATUS)
    assert [j.descriptor for j in service.scan("habit_ttl", JobState.FAILED).jobs] == [expired]


def test_max_priority_gives_the_queue_a_priority_per_kombu_priority(
    via: Connection, service: JobService
) -> None:
    queue = Queue("habit_prio", Exchange("habit_prio"), routing_key="habit_prio", max_priority=10)
    got: list[int] = []
    with via as conn:
        producer = Producer(conn.default_channel)
        for priority in [10, 3, 6, 0, 1, 9, 2]:
            producer.publish(priority, exchange=queue.exchange, routing_key="habit_prio",
                             declare=[queue], priority=priority)
        assert service.queue_config("habit_prio", fresh=True).priorities == 11

        def callback(body: int, message: Message) -> None:
            assert f":p{body + 1}:" in message.delivery_tag
            got.append(body)
            message.ack()

        with Consumer(conn, [queue], callbacks=[callback]):
            while len(got) < 7:
                conn.drain_events(timeout=2)
    assert got == [0, 1, 2, 3, 6, 9, 10]


def test_a_late_reject_of_a_timed_out_delivery_leaves_the_jobs_next_run_alone(
    via: Connection, service: JobService
) -> None:
    """A job whose claim timed out while its first delivery still ran comes
    back to the same consumer (the same source): the first delivery's late
    reject is stale, so it does not send the job back to PENDING behind the
    second run (a third, concurrent run); the second delivery's ack ends it."""
    name = "habit_late"
    with via as conn, closing(conn.SimpleQueue(name)) as queue:
        queue.put({"n": 1})
        service.update_queue(job_queue_name(name), claim_timeout_ms=100)
        first = queue.get_nowait()
        monitor = Monitor(service.operators, queues=[job_queue_name(name)])
        deadline = time.monotonic() + 10
        while monitor.run_once().claims_repended == 0:
            assert time.monotonic() < deadline, "the claim did not time out"
            time.sleep(0.05)
        second = queue.get_nowait()
        d = _job(second.delivery_tag)
        assert d == _job(first.delivery_tag) and second.delivery_tag != first.delivery_tag
        running = service.lookup([d])[d]
        first.reject()  # the first run failed, late
        assert service.lookup([d])[d] == running, "the late reject changed the second run's job"
        second.ack()
        done = service.lookup([d])[d]
        assert (done.state, done.attempts_remaining) == (JobState.SUCCEEDED, running.attempts_remaining)


@pytest.mark.parametrize("url", ["dead", "redis"])
def test_a_url_naming_no_pinlater_server_fails_fast_and_clearly(url: str) -> None:
    address = f"127.0.0.1:{free_port()}" if url == "dead" else f"127.0.0.1:{REDIS_PORTS[0]}"
    started = time.monotonic()
    with Connection(f"pinlater://{address}", connect_timeout=2) as conn, \
            pytest.raises(conn.connection_errors) as caught:
        conn.connect()
    assert time.monotonic() - started < 10
    assert f"no PinLater server at {address}" in str(caught.value)


def test_any_kombu_queue_name_is_a_stored_queue(via: Connection, service: JobService) -> None:
    """Not only PinLater names: a dotted or long name is stored too (only
    Celery's own broadcast queues are pub/sub), so a message published
    before its consumer exists is not lost."""
    name = "emails.high-" + "x" * 60
    with via as conn, closing(conn.SimpleQueue(name)) as queue:
        queue.put({"to": "a@example.com"})
        [stored] = [q for q in service.queue_names() if q.startswith("emails_high_")]
        assert is_task_queue(stored) and stored == job_queue_name(name)
        assert service.count(stored, JobState.PENDING) == 1
        message = queue.get(timeout=2)
        assert message.payload == {"to": "a@example.com"}
        message.ack()
        assert service.count(stored, JobState.SUCCEEDED) == 1
    assert job_queue_name("celery@host.celery.pidbox") == "celery@host.celery.pidbox"
    assert not is_task_queue(job_queue_name("celeryev.5f0c"))
    # A trailing newline is no PinLater name: stored under one that is.
    assert not is_task_queue("emails\n") and is_task_queue(job_queue_name("emails\n"))
