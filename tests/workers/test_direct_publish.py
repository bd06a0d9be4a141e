"""``apply_async`` (from application code or a running task) skips Celery's and Kombu's publish layers
(``workers.direct_publish``): the channel must get the very message
Celery's path gives it, for every option that path handles, and the rest
must take Celery's path."""

from __future__ import annotations

import enum
import typing
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery, group, signals
from celery._state import _task_stack
from celery.utils.saferepr import saferepr
from hypothesis import given, settings
from hypothesis import strategies as st

from pinlater.errors import ShardConnectionFailed
from pinlater.service import JobService
from tests.workers.celery_tasks import qname
from workers import direct_publish
from workers.channel import Channel

Sent = list[tuple[str, dict[str, Any]]]
Messages = list[dict[str, Any]]
ETA = datetime(2031, 5, 4, 3, 2, 1, 123456, tzinfo=UTC)


class Color(enum.IntEnum):
    RED = 1


class Point(typing.NamedTuple):
    x: int
    y: int


@pytest.fixture
def drop_queues(service: JobService) -> Iterator[None]:
    """Deletes the queues this module stores jobs in, after the test: a later
    test's worker must not run them (within the config cache's TTL an
    enqueue still lands in a queue deleted meanwhile, and the next worker
    to declare the queue finds it)."""
    yield
    for base in ("w_pub", "w_fail"):
        # Unconditionally: its config may be gone while its jobs are not.
        service.delete_queue(qname(base), "secret")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sent]:
    """What reaches the channel's enqueue (nothing is stored), and which path."""
    got: Sent = []
    monkeypatch.setattr(Channel, "_enqueue", lambda self, queue, message: got.append((queue, message)))
    yield got


def _both(app: Celery, task_name: str, monkeypatch: pytest.MonkeyPatch, sent: Sent, args: tuple[Any, ...],
          options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    task = app.tasks[task_name]
    calls: list[bool] = []
    real = direct_publish.publish

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(True)
        return real(*a, **k)

    monkeypatch.setattr(direct_publish, "publish", counted)
    result = task.apply_async(args, task_id="the-task-id", **dict(options))
    assert calls, "the direct path was not taken"
    monkeypatch.setattr(direct_publish, "usable", lambda *a: False)
    task.apply_async(args, task_id="the-task-id", **dict(options))
    monkeypatch.undo()
    assert len(sent) == 2 and sent[0][0] == sent[1][0]
    direct, celery = sent[0][1], sent[1][1]
    sent.clear()
    return direct, celery, result


OPTIONS: list[dict[str, Any]] = [
    {},
    {"eta": ETA},
    {"eta": ETA.isoformat(), "priority": 2, "headers": {"h": 1, "nested": [1, {"a": None}]}},
    {"expires": ETA, "time_limit": 10, "soft_time_limit": 5},
    {"expires": ETA.isoformat(), "ignore_result": False, "serializer": "json"},
    {"retry": False, "delivery_mode": 1},
    {"retry_policy": {"max_retries": 1}, "queue": qname("w_pub")},
    {"idempotency_key": "k-1"},
    # As a group publishes its tasks.
    {"group_id": "g-1", "group_index": 3, "reply_to": "r-1", "add_to_parent": False},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) or "none" for o in OPTIONS])
def test_the_channel_gets_the_message_celerys_path_gives_it(
    app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent, options: dict[str, Any]
) -> None:
    direct, celery, result = _both(app, "tests.w_pub", monkeypatch, sent, (1, "two", {"3": [4.5]}), options)
    if "expires" in options:  # a TTL from now, on each path's clock
        ttls = [int(m["properties"].pop("expiration")) for m in (direct, celery)]
        assert abs(ttls[0] - ttls[1]) < 5000 and ttls[0] > 100_000_000
    assert direct == celery
    assert result.id == "the-task-id" and result.ignored == options.get("ignore_result", True)


def test_times_relative_to_now_agree(app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent) -> None:
    direct, celery, _ = _both(app, "tests.w_pub", monkeypatch, sent, (), {"countdown": 60, "expires": 600})
    for name in ("eta", "expires"):
        got = datetime.fromisoformat(direct["headers"].pop(name))
        want = datetime.fromisoformat(celery["headers"].pop(name))
        assert abs(got - want) < timedelta(seconds=5)
    assert direct["properties"]["expiration"] == "600000"
    assert direct == celery


def test_the_task_retry_policy_and_shadow_travel_as_before(
    app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent
) -> None:
    direct, celery, _ = _both(app, "tests.w_fail", monkeypatch, sent, (), {"shadow": "seen.as"})
    assert direct == celery
    assert direct["headers"]["shadow"] == "seen.as" and direct["headers"]["pinlater_attempts"] == 3


@contextmanager
def running(task: Any, request_id: str, root_id: str | None, priority: int | None = None) -> Iterator[Any]:
    """``task`` as a worker runs it: on Celery's task stack, with a request."""
    task.push_request(id=request_id, root_id=root_id, called_directly=False, children=[],
                      delivery_info={"priority": priority})
    _task_stack.push(task)
    try:
        yield task.request
    finally:
        _task_stack.pop()
        task.pop_request()


IN_TASK: list[tuple[str | None, dict[str, Any]]] = [
    (None, {}), ("the-root", {}), ("the-root", {"priority": 3, "idempotency_key": "k-2"}),
    (None, {"add_to_parent": False}),
]


@pytest.mark.parametrize(("root_id", "options"), IN_TASK)
def test_a_publish_inside_a_running_task_links_parent_and_child_as_celerys_path_does(
    app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent, root_id: str | None, options: dict[str, Any]
) -> None:
    parent = app.tasks["tests.w_fail"]
    with running(parent, "the-parent", root_id) as request:
        assert app.current_worker_task is parent
        direct, celery, result = _both(app, "tests.w_pub", monkeypatch, sent, (7,), options)
        # Each path added its result to the parent's trail, but with add_to_parent=False.
        trail = [child.id for child in request.children]
    assert direct == celery
    assert direct["headers"]["parent_id"] == "the-parent"
    assert direct["headers"]["root_id"] == (root_id or "the-parent")
    assert trail == ([] if options.get("add_to_parent") is False else ["the-task-id"] * 2)
    assert result.id == "the-task-id"


def test_a_task_that_inherits_its_parents_priority_publishes_on_celerys_path(
    app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent
) -> None:
    monkeypatch.setattr(direct_publish, "publish", lambda *a: pytest.fail("took the direct path"))
    monkeypatch.setitem(app.conf, "task_inherit_parent_priority", True)
    with running(app.tasks["tests.w_fail"], "the-parent", None, priority=3):
        app.tasks["tests.w_pub"].apply_async((1,))
    assert sent[0][1]["headers"]["parent_id"] == "the-parent" and sent[0][1]["properties"]["priority"] == 3


@pytest.mark.parametrize("case", ["link", "receiver", "option"])
def test_anything_else_takes_celerys_path(
    app: Celery, monkeypatch: pytest.MonkeyPatch, sent: Sent, case: str
) -> None:
    task = app.tasks["tests.w_pub"]
    monkeypatch.setattr(direct_publish, "publish", lambda *a: pytest.fail("took the direct path"))
    options: dict[str, Any] = {}
    if case == "link":
        options["link"] = task.si(2)
    elif case == "option":
        options["argsrepr"] = "(hidden)"

    def receiver(**_: Any) -> None:
        return None

    if case == "receiver":
        signals.before_task_publish.connect(receiver)
    try:
        result = task.apply_async((1,), **options)
    finally:
        signals.before_task_publish.disconnect(receiver)
    assert [queue for queue, _ in sent] == [qname("w_pub")]
    assert sent[0][1]["headers"]["id"] == result.id


@pytest.mark.usefixtures("drop_queues")
def test_a_direct_publish_stores_the_job_and_gives_its_descriptor(app: Celery, service: JobService) -> None:
    result = app.tasks["tests.w_pub"].apply_async((7,), priority=2)
    assert result.descriptor.startswith(f"{qname('w_pub')}:") and ":p2:" in result.descriptor
    stored = service.lookup([result.descriptor], include_body=True)[result.descriptor].body
    assert stored is not None and stored.startswith(b"\x00C2")


@pytest.mark.usefixtures("drop_queues")
@pytest.mark.parametrize("path", ["direct", "celery"])
def test_a_publish_retried_after_a_connection_error_keeps_its_attempts_and_key(
    app: Celery, service: JobService, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "celery":
        monkeypatch.setattr(direct_publish, "usable", lambda *a: False)
    real = JobService.enqueue
    failed: list[str] = []

    def first_fails(self: JobService, queue: str, jobs: Any, **kwargs: Any) -> list[str]:
        if not failed:
            failed.append(queue)
            raise ShardConnectionFailed("injected: connection reset")
        return real(self, queue, jobs, **kwargs)

    monkeypatch.setattr(JobService, "enqueue", first_fails)
    key = f"retried-{uuid.uuid4().hex}"
    result = app.tasks["tests.w_fail"].apply_async(idempotency_key=key)
    again = app.tasks["tests.w_fail"].apply_async(idempotency_key=key)
    assert failed == [qname("w_fail")]
    assert again.descriptor == result.descriptor, "the idempotency key was lost on the retry"
    assert service.lookup([result.descriptor])[result.descriptor].attempts_allowed == 3


# -- the arguments' repr --------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["a'b", 'a"b', "a\\b", "\n", "é", ""])
_SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT
_NESTED = st.lists(_SCALAR, max_size=3) | st.tuples(_SCALAR) | st.just(Color.RED)
_ARGS = st.tuples() | st.lists(_SCALAR | _NESTED, max_size=6).map(tuple) | st.dictionaries(_TEXT, _SCALAR, max_size=5)


@settings(max_examples=600, deadline=None)
@given(_ARGS, st.sampled_from([3, 8, 40, 1024]), st.sampled_from([0, 1, 3]))
def test_the_arguments_repr_is_celerys_saferepr(value: Any, maxsize: int, maxlevels: int) -> None:
    assert direct_publish.arguments_repr(value, maxsize, maxlevels) == saferepr(value, maxsize, maxlevels=maxlevels)


def test_the_arguments_repr_of_a_named_tuple_or_a_long_text_is_celerys() -> None:
    for value in [Point(1, 2), ("x" * 2000,), (Color.RED,), {1: 2}]:
        assert direct_publish.arguments_repr(value, 1024, 3) == saferepr(value, 1024, maxlevels=3)


def test_flat_plain_arguments_skip_saferepr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_publish, "saferepr", None)  # a call would raise
    flat = (12, None, True, 1.5, "Ann Lee")
    assert direct_publish.arguments_repr(flat, 1024, 3) == "(12, None, True, 1.5, 'Ann Lee')"
    assert direct_publish.arguments_repr({"user": 7, "name": "é"}, 1024, 3) == "{'user': 7, 'name': 'é'}"
    assert direct_publish.arguments_repr((), 1024, 3) == "()"


# -- delay_many: the direct path decided once for every call -------------------------------------------------

MANY: dict[str, list[Any]] = {"tests.w_pub": [(1, "two", {"3": [4.5]}), (), ("Ann O'Neil", None), [7]],
                              "tests.w_fail": [(), ()]}


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    task_id = message["headers"]["id"]
    headers = {k: ("ID" if v == task_id else v) for k, v in message["headers"].items()}
    properties = {k: ("ID" if v == task_id else v) for k, v in message["properties"].items()}
    properties.pop("expiration", None)  # a TTL from now, on each call's clock (compared above)
    return {**message, "headers": headers, "properties": properties}


@pytest.mark.parametrize("task_name", ["tests.w_pub", "tests.w_fail"])
@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) or "none" for o in OPTIONS])
def test_delay_many_gives_the_channel_what_publishes_one_by_one_on_celerys_path_give_it(
    app: Celery, sent: Sent, options: dict[str, Any], task_name: str
) -> None:
    task = app.tasks[task_name]
    with pytest.MonkeyPatch.context() as patch:
        if "idempotency_key" not in options:  # a key is per call: those calls publish one by one
            patch.setattr(direct_publish, "publish", lambda *a: pytest.fail("a call of delay_many published alone"))
        results = task.delay_many(MANY[task_name], **options)
    many = [message for _, message in sent]
    sent.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_publish, "usable", lambda *a: False)
        for call in MANY[task_name]:
            task.apply_async(tuple(call), **options)
    one_by_one = [message for _, message in sent]
    assert [m["headers"]["id"] for m in many] == [r.id for r in results]
    assert len({r.id for r in results}) == len(MANY[task_name])
    assert [_without_ids(m) for m in many] == [_without_ids(m) for m in one_by_one]


def test_delay_many_with_a_route_of_the_arguments_publishes_one_by_one(
    app: Celery, sent: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def by_first_argument(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any) -> Any:
        return {"queue": qname("w_pub")} if name == "tests.w_pub" and args and args[0] == 1 else None

    router = app.amqp.router
    monkeypatch.setattr(router, "routes", [*router.routes, by_first_argument])
    calls: list[Any] = []
    real = direct_publish.publish
    def counted(*a: Any) -> Any:
        calls.append(a[1])
        return real(*a)

    monkeypatch.setattr(direct_publish, "publish", counted)
    app.tasks["tests.w_pub"].delay_many([(1,), (2,)])
    assert calls == [(1,), (2,)]
    assert len(sent) == 2


@pytest.mark.parametrize("bad", [5, "ab", {1: "x"}, (1, 2, 3, 4)])
def test_a_bad_call_of_delay_many_publishes_none_of_them(app: Celery, sent: Sent, bad: Any) -> None:
    task = app.tasks["tests.w_fail"]  # takes no arguments
    calls = [(), (), bad, ()] if bad != (1, 2, 3, 4) else [(), bad]
    with pytest.raises(TypeError, match=r"delay_many: call \d") as caught:
        task.delay_many(calls)
    assert "\n" not in str(caught.value)
    assert sent == []


# -- a group's tasks, and publishes inside one producer_or_acquire: one decision ------------------------------

def _without_group(message: dict[str, Any]) -> dict[str, Any]:
    found = _without_ids(message)
    return {**found, "headers": {k: ("GROUP" if k == "group" else v) for k, v in found["headers"].items()}}


@pytest.mark.parametrize("task_name", ["tests.w_pub", "tests.w_fail"])
def test_a_groups_tasks_share_one_decision_and_give_the_channel_what_celerys_path_gives(
    app: Celery, sent: Sent, monkeypatch: pytest.MonkeyPatch, task_name: str
) -> None:
    task = app.tasks[task_name]
    calls = MANY[task_name]
    decided: list[Any] = []
    real = direct_publish.prepare

    def counted(*a: Any, **k: Any) -> Any:
        decided.append(a[2])
        return real(*a, **k)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_publish, "prepare", counted)
        result = group(task.s(*call) for call in calls).apply_async()
    shared = [message for _, message in sent]
    sent.clear()
    assert len(decided) == 1  # w_fail's attempts travel in a header: flat headers are compared too
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_publish, "usable", lambda *a: False)
        group(task.s(*call) for call in calls).apply_async()
    celerys = [message for _, message in sent]
    assert [m["headers"]["group_index"] for m in shared] == list(range(len(calls)))
    assert [m["headers"]["id"] for m in shared] == [r.id for r in result.results]
    assert {m["headers"]["group"] for m in shared} == {result.id}
    assert [_without_group(m) for m in shared] == [_without_group(m) for m in celerys]


def test_publishes_in_one_scope_with_other_options_or_a_route_of_the_arguments_decide_for_themselves(
    app: Celery, sent: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def by_first_argument(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any) -> Any:
        return {"queue": qname("w_pub"), "priority": 3} if name == "tests.w_pub" and args and args[0] == 1 else None

    task = app.tasks["tests.w_pub"]

    def each(publishes: list[tuple[tuple[int, ...], dict[str, Any]]]) -> tuple[Messages, Messages]:
        """The messages of ``publishes`` in one scope, on the direct path and on Celery's."""
        got = []
        for direct in (True, False):
            with pytest.MonkeyPatch.context() as patch:
                if not direct:
                    patch.setattr(direct_publish, "usable", lambda *a: False)
                with app.producer_or_acquire() as producer:
                    for args, options in publishes:
                        task.apply_async(args, producer=producer, **options)
            got.append([message for _, message in sent])
            sent.clear()
        return got[0], got[1]

    # Options that differ, or equal but for their types (equal keys, not equal JSON).
    direct, celerys = each([((2,), {"priority": 1}), ((2,), {"priority": 2}), ((2,), {}), ((2,), {"priority": 1}),
                            ((2,), {"headers": {"h": 1}}), ((2,), {"headers": {"h": 1.0}}),
                            ((2,), {"headers": {"h": True}}), ((2,), {"headers": {"h": [1]}}),
                            ((2,), {"time_limit": 10}), ((2,), {"time_limit": 10.0}),
                            ((2,), {"eta": ETA}), ((2,), {"eta": ETA.astimezone(timezone(timedelta(hours=2)))})])
    assert [m["properties"].get("priority") for m in direct[:4]] == [1, 2, 0, 1]
    assert [m["headers"]["h"] for m in direct[4:8]] == [1, 1.0, True, [1]]
    assert [type(m["headers"]["h"]) for m in direct[4:7]] == [int, float, bool]
    assert [type(m["headers"]["timelimit"][0]) for m in direct[8:10]] == [int, float]
    assert [m["headers"]["eta"][-6:] for m in direct[10:]] == ["+00:00", "+02:00"]  # one instant, two texts
    assert [_without_ids(m) for m in direct] == [_without_ids(m) for m in celerys]

    router = app.amqp.router
    monkeypatch.setattr(router, "routes", [by_first_argument, *router.routes])  # the first route that answers wins
    direct, celerys = each([((2,), {}), ((1,), {}), ((2,), {}), ((1,), {})])
    assert [m["properties"].get("priority") for m in direct] == [0, 3, 0, 3]
    assert [_without_ids(m) for m in direct] == [_without_ids(m) for m in celerys]
