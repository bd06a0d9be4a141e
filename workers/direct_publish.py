# mypy: disable-error-code="no-untyped-call,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""``PinLaterTask.apply_async`` straight to the channel, for the common case
(a publish from application code, or a task publishing its successors).

Celery's ``send_task`` and Kombu's ``Producer.publish`` add to every
publish routing twice over, publish signals with no receivers, a retry
wrapper, entity declarations, ``prepare_message`` and ~10 reads of
``app.conf`` (4-7 µs each): about half the Python of a publish before the
job service's call. When none of what those layers add
applies (no callbacks, no publish signals connected, not inside a running
task, only options listed here), the task builds the very message they
would, with Celery's own ``as_task_v2``, and hands it to the channel's
``basic_publish`` under the same retry policy and error translation as
Kombu's. Anything else takes Celery's path. ``tests/workers/
test_direct_publish.py`` checks both give the channel the same message.

It follows Celery's and Kombu's code, private parts included
(``Task._get_exec_options``, ``Connection._reraise_as_library_errors``,
``AMQP.as_task_v2``'s positional parameters), as of Celery and Kombu 5.7:
``tests/unit/test_third_party_guards.py`` fails when those change.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from celery import Task, signals
from celery.app.routes import MapRoute
from celery.utils import uuid
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from celery.utils.time import isoparse
from kombu.entity import maybe_delivery_mode
from kombu.serialization import dumps

from workers import bulk, registry

log = logging.getLogger(__name__)

# apply_async options this path handles; any other one takes Celery's path.
DIRECT_OPTIONS = frozenset({
    "countdown", "eta", "expires", "priority", "headers", "ignore_result", "time_limit",
    "soft_time_limit", "queue", "serializer", "retry", "retry_policy", "delivery_mode",
    # A group's tasks (a chord's carry "chord" too, and take Celery's path).
    "group_id", "group_index", "reply_to", "add_to_parent",
})
# What Celery's router may hand back for a plain task queue route.
_ROUTED = frozenset({"queue", "serializer", "priority", "headers", "retry", "retry_policy", "delivery_mode",
                     "routing_key", "exchange", "immediate", "mandatory"})
_CELERY_SHADOW_NAME = Task.shadow_name
_SIGNALS = (signals.before_task_publish, signals.after_task_publish, signals.task_sent)


@dataclass(frozen=True, slots=True)
class _AppDefaults:
    """An app's publish settings, read at its first publish: as Celery's own
    path reads them once (``AMQP._create_task_sender``), and each read of
    ``app.conf`` costs microseconds."""

    plain: bool  # task protocol 2, no compression
    serializer: str
    delivery_mode: Any
    retry: bool
    retry_policy: dict[str, Any]
    repr_maxlevels: int


_APP_DEFAULTS: WeakKeyDictionary[Any, _AppDefaults] = WeakKeyDictionary()


def _defaults(app: Any) -> _AppDefaults:
    known = _APP_DEFAULTS.get(app)
    if known is None:
        conf = app.conf
        known = _APP_DEFAULTS[app] = _AppDefaults(
            plain=conf.task_protocol == 2 and not conf.task_compression,
            serializer=conf.task_serializer,
            delivery_mode=conf.task_default_delivery_mode,
            retry=conf.task_publish_retry,
            retry_policy=dict(conf.task_publish_retry_policy or {}),
            repr_maxlevels=conf.task_repr_maxlevels,
        )
    return known


def usable(task: Any, link: Any, link_error: Any, options: dict[str, Any]) -> bool:
    """Whether this publish can skip Celery's and Kombu's publish layers
    without a difference anyone could see. In a bulk scope, decided once per
    task and set of option names (the app's settings read once a scope)."""
    known = bulk.memo()
    if known is None:
        return _usable(task, link, link_error, options)
    key = (task, link is None and link_error is None, frozenset(options))
    decided = known.get(key)
    if decided is None:
        decided = known[key] = _usable(task, link, link_error, options)
    return bool(decided)


def _usable(task: Any, link: Any, link_error: Any, options: dict[str, Any]) -> bool:
    if link is not None or link_error is not None or not DIRECT_OPTIONS.issuperset(options):
        return False
    if any(signal.receivers for signal in _SIGNALS):
        return False
    if getattr(task, "_dump_pydantic_arguments", None) is not None:
        return False
    app = task.app
    if not _defaults(app).plain:
        return False
    # Read on every publish, as Celery's path does (tests switch eager on).
    conf = app.conf
    if conf.task_always_eager or conf.task_send_sent_event:
        return False
    # Inside a task this path links parent and child as Celery's does (root
    # and parent ids, the parent's trail: ``Prepared.send``), but for an
    # inherited priority, which would change the route.
    return not (conf.task_inherit_parent_priority and app.current_worker_task is not None)


def publish(task: Any, args: Any, kwargs: Any, task_id: str | None, producer: Any, shadow: Any,
            options: dict[str, Any]) -> Any:
    """Publishes as ``Task.apply_async`` would; None when the route is not a
    plain task queue (the caller then takes Celery's path)."""
    prepared = _shared(task, producer, options)
    if prepared is _ALONE:
        prepared = prepare(task, producer, options, (args, kwargs))
    if prepared is None:
        return None
    return prepared.send(args, kwargs, task_id, shadow, group_index=options.get("group_index"))


def _comparable(options: dict[str, Any]) -> frozenset[Any]:
    """``options`` but the group index, as a set equal for options that
    make the same message: with each value's type and repr, since equal
    values may not be the same text (1, 1.0 and True; one instant in two
    time zones), a flat dict (the headers) by its items. TypeError for a
    value that cannot be hashed."""
    items = []
    for name, value in options.items():
        if name == "group_index":
            continue
        text = repr(value)
        if type(value) is dict:
            value = frozenset((k, type(v), v) for k, v in value.items())
        items.append((name, type(value), value, text))
    return frozenset(items)


_ALONE: Any = object()
_TAKEN: Any = object()  # Prepared.send's group index: the prepared options'


def _shared(task: Any, producer: Any, options: dict[str, Any]) -> Any:
    """In a bulk scope (a ``group``'s tasks, publishes inside
    ``producer_or_acquire``), what ``prepare`` decides for publishes of one
    task with the same options but their group index, decided once;
    ``_ALONE`` when this publish must decide for itself: outside scopes, with
    options that cannot be compared (nested headers), a task that names its
    publishes (``shadow_name``), or a route that may depend on the
    arguments."""
    known = bulk.memo()
    if known is None or type(task).shadow_name is not _CELERY_SHADOW_NAME:
        return _ALONE
    try:
        # The producer's id: the Prepared kept in the memo holds the producer, so its id is not reused.
        key = ("prepared", task, id(producer), _comparable(options))
        decided = known.get(key)
    except TypeError:  # an option's value is a list, or a dict of them
        return _ALONE
    if decided is None:
        decided = known[key] = prepare(task, producer, options) or _ALONE
    return decided


def prepare(task: Any, producer: Any, options: dict[str, Any],
            routed_by: tuple[Any, Any] | None = None) -> Prepared | None:
    """What publishes of ``task`` with ``options`` decide alike, decided
    once: the options' defaults, the route and the queue. ``routed_by``: the
    arguments the route is asked with; None for publishes of many
    arguments, which only routers that ignore them (``task_routes`` maps,
    the PinLater app's own router) can share. None when the route is not a
    plain task queue, or is a function of the arguments."""
    app = task.app
    amqp = app.amqp
    # Task.apply_async's checks and option defaults, in its order.
    if task.soft_time_limit and task.time_limit and task.soft_time_limit > task.time_limit:
        raise ValueError("soft_time_limit must be less than or equal to time_limit")
    given = options
    options = dict(task._get_exec_options(), **options)
    options.setdefault("ignore_result", task.ignore_result)
    # App.send_task's.
    taken = {name: options.pop(name, None) for name in _SEND_TASK_OPTIONS}
    taken["add_to_parent"] = options.pop("add_to_parent", True)
    if routed_by is None:
        if not all(route is registry.route or isinstance(route, MapRoute) for route in amqp.router.routes):
            return None
        routed_by = ((), {})
    routed = amqp.router.route(options, task.name, *routed_by, task)
    target = _queue_name(amqp, routed)
    if target is None:
        return None
    defaults = _defaults(app)
    queue = routed.get("queue")
    delivery_mode = maybe_delivery_mode(
        routed.get("delivery_mode") or getattr(getattr(queue, "exchange", None), "delivery_mode", None)
        or defaults.delivery_mode
    )
    return Prepared(task, producer, given, target, routed, taken, taken.pop("reply_to") or app.thread_oid,
                    delivery_mode, anon_nodename())


# The options App.send_task takes out of a publish's before routing it.
_SEND_TASK_OPTIONS = ("countdown", "eta", "time_limit", "soft_time_limit", "expires", "ignore_result", "group_id",
                      "group_index", "reply_to")


@dataclass(slots=True)  # not frozen: a frozen one's __init__ costs a setattr call a field, every publish
class Prepared:
    """A publish with its route decided: ``send`` publishes one call."""

    task: Any
    producer: Any
    given: dict[str, Any]  # the publish's options, as the task's shadow_name sees them
    target: str  # the task queue
    routed: dict[str, Any]
    taken: dict[str, Any]  # _SEND_TASK_OPTIONS but reply_to
    reply_to: Any
    delivery_mode: Any
    origin: str  # as_task_v2's default, the same for every publish of a process

    def send(self, args: Any, kwargs: Any, task_id: str | None, shadow: Any, *, checked: bool = False,
             group_index: Any = _TAKEN) -> Any:
        """``checked``: the arguments were checked against the task's
        signature already (``delay_many`` checks every call first).
        ``group_index``: this call's place in its group, where the
        publishes that share this differ."""
        task, taken, routed = self.task, self.taken, self.routed
        if group_index is _TAKEN:
            group_index = taken["group_index"]
        app = task.app
        amqp = app.amqp
        defaults = _defaults(app)
        if task.typing and not checked:
            check_arguments = getattr(task, "__header__", None)
            if check_arguments is not None:
                check_arguments(*(args or ()), **(kwargs or {}))
        if task.__v2_compat__:
            shadow = shadow or task.shadow_name(task(), args, kwargs, self.given)
        else:
            shadow = shadow or task.shadow_name(args, kwargs, self.given)
        task_id = task_id or uuid()
        expires = taken["expires"]
        expiration = None
        if expires is not None:
            when = isoparse(expires) if isinstance(expires, str) else expires
            expiration = when if isinstance(when, int | float) else (when - app.now()).total_seconds()
            if expiration < 0:
                log.warning("%s has an expiration date in the past (%ss ago): set to 0", task_id, -expiration)
                expiration = 0
        # Inside a running task, as App.send_task links the two.
        parent = app.current_worker_task
        root_id = parent_id = None
        if parent is not None:
            root_id = parent.request.root_id or parent.request.id
            parent_id = parent.request.id
        # The reprs as as_task_v2 makes them, without its two reads of app.conf.
        argsrepr = arguments_repr(args or (), amqp.argsrepr_maxsize, defaults.repr_maxlevels)
        kwargsrepr = arguments_repr(kwargs or {}, amqp.kwargsrepr_maxsize, defaults.repr_maxlevels)
        ignore_result = taken["ignore_result"]
        headers, properties, body, _ = amqp.create_task_message(
            task_id, task.name, args, kwargs, taken["countdown"], taken["eta"], taken["group_id"],
            group_index, expires, 0, None, None, None, self.reply_to, taken["time_limit"],
            taken["soft_time_limit"], False, root_id, parent_id, shadow, None,
            origin=self.origin, ignore_result=ignore_result, replaced_task_nesting=0, argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
        )
        # AMQP.send_task_message's and Producer.publish's, for a direct route.
        if routed.get("headers"):
            headers.update(routed["headers"])
        properties["delivery_mode"] = self.delivery_mode
        if expiration is not None:
            properties["expiration"] = str(int(expiration * 1000))
        content_type, content_encoding, data = dumps(body, serializer=routed.get("serializer") or defaults.serializer)
        priority = routed.get("priority")
        target = self.target
        producer = self.producer

        with nullcontext(producer) if producer is not None else app.producer_or_acquire() as bound:
            connection = bound.connection

            def send() -> None:
                channel = bound.channel
                message = channel.prepare_message(data, priority, content_type, content_encoding, headers,
                                                  properties)
                channel.basic_publish(message, exchange="", routing_key=target)

            with connection._reraise_as_library_errors():
                if not ignore_result:
                    app.backend.on_task_call(bound, task_id)
                retry = defaults.retry if routed.get("retry") is None else routed["retry"]
                if retry and not bulk.takes(headers):  # a bulk scope's publish only waits: nothing to retry yet
                    policy = dict(defaults.retry_policy, **(routed.get("retry_policy") or {}))
                    connection.ensure(bound, send, **policy)()
                else:
                    send()
        result = task.AsyncResult(task_id)
        result.ignored = ignore_result
        if parent is not None and taken["add_to_parent"]:
            parent.add_trail(result)
        return result


_SCALARS = frozenset({int, float, bool, type(None)})


def _plain(text: str) -> bool:
    """Whether saferepr quotes ``text`` as repr does (it escapes quotes only)."""
    return text.isprintable() and "'" not in text and "\\" not in text


def arguments_repr(value: Any, maxsize: int, maxlevels: int) -> str:
    """``saferepr(value, maxsize, maxlevels=maxlevels)``, Celery's repr of a
    task's arguments. Flat arguments of plain types (ids, flags, short
    names: most tasks') are the builtin repr, which is the same text at a
    tenth of saferepr's ~4-12 µs; anything else is saferepr's.
    ``tests/workers/test_direct_publish.py`` compares the two."""
    kind = type(value)
    if maxlevels < 1:  # 0 is no limit, below it saferepr elides even the outer container
        return str(saferepr(value, maxsize, maxlevels=maxlevels))
    if kind is tuple:
        items: Any = value
    elif kind is dict:
        if not all(type(k) is str and _plain(k) for k in value):
            return str(saferepr(value, maxsize, maxlevels=maxlevels))
        items = value.values()
    else:
        return str(saferepr(value, maxsize, maxlevels=maxlevels))
    for item in items:
        if type(item) in _SCALARS or (type(item) is str and _plain(item)):
            continue
        return str(saferepr(value, maxsize, maxlevels=maxlevels))
    text = repr(value)
    # Shorter than the limit: nothing of it is cut (saferepr cuts at maxsize).
    return text if len(text) < maxsize else str(saferepr(value, maxsize, maxlevels=maxlevels))


def _queue_name(amqp: Any, routed: dict[str, Any]) -> str | None:
    """The queue a route sends to by name (AMQP.send_task_message's direct
    exchange case), or None for anything else."""
    if not _ROUTED.issuperset(routed) or routed.get("immediate") or routed.get("mandatory"):
        return None
    queue = routed.get("queue")
    exchange = routed.get("exchange")
    if queue is None and exchange is None:
        queue = amqp.default_queue
    if isinstance(queue, str):
        queue = amqp.queues.get(queue)
    if queue is None or getattr(queue.exchange, "type", "direct") != "direct":
        return None
    if exchange and routed.get("routing_key"):
        return None
    return str(queue.name)

