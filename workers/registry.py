"""Which task runs each PinLater queue, and the config a queue gets when
it is first created: one task type per queue.

Tasks register here when they are bound to an app (``PinLaterTask.on_bound``),
in every process that imports them; the transport reads it to name the task
of a raw job body and to create missing queues. A process-wide table rather
than a transport option because transport options end up in ``inspect
conf`` replies, which must stay JSON.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from pinlater.limits import MAX_PRIORITIES
from pinlater.queue_config import QUEUE_NAME_MAX

_TASK_QUEUE = re.compile(rf"[A-Za-z0-9_]{{1,{QUEUE_NAME_MAX}}}")


def is_task_queue(name: str) -> bool:
    """PinLater queue names are letters, digits and underscore; every queue
    Celery makes for itself (``host.celery.pidbox``, ``celeryev.UUID``,
    ``UUID.reply.celery.pidbox``) has a dot, so it is transient traffic."""
    return bool(_TASK_QUEUE.fullmatch(name))


def is_transient(name: str) -> bool:
    """Celery's and Kombu's own queues of broadcast traffic: remote control
    and its replies, events, ``Broadcast`` queues (pub/sub, never stored)."""
    return name.endswith(".pidbox") or name.startswith(_TRANSIENT_PREFIXES)


_TRANSIENT_PREFIXES = ("celeryev.", "bcast.")
_HASHED_KEEP = QUEUE_NAME_MAX - 9


def job_queue_name(name: str) -> str:
    """The PinLater queue of a Kombu queue name. Any name is a stored queue
    except Celery's transient ones (returned unchanged, and not task queues):
    a name that is not a PinLater name (a dot, a dash, over 50 characters)
    becomes one, the same in every process: its characters with the others
    as ``_``, cut to 41, then ``_`` and 8 hex digits of its SHA-1."""
    if is_task_queue(name) or is_transient(name):
        return name
    digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', name)[:_HASHED_KEEP]}_{digest}"


def queue_for_task(task_name: str) -> str:
    """Default queue of a task that names none: its name made a queue name."""
    return re.sub(r"[^A-Za-z0-9_]", "_", task_name)[-QUEUE_NAME_MAX:]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    task_name: str
    # Keyword arguments of create_queue (priorities, max_dequeue_rate,
    # claim_timeout_ms, retry...): used only when the queue does not exist.
    create: dict[str, Any] = field(default_factory=dict)


_lock = threading.Lock()
_specs: dict[str, QueueSpec] = {}
# Queues declared with Kombu's max_priority in this process: N (priorities 0..N).
_max_priorities: dict[str, int] = {}


def register(queue: str, spec: QueueSpec) -> None:
    if not is_task_queue(queue):
        raise ValueError(f"{queue!r} is not a PinLater queue name (letters, digits, underscore)")
    with _lock:
        existing = _specs.get(queue)
        if existing is not None and existing.task_name != spec.task_name:
            raise ValueError(
                f"queue {queue!r} already runs {existing.task_name}; one task type per queue "
                f"(cannot also run {spec.task_name})"
            )
        _specs[queue] = spec


def declare_max_priority(queue: str, max_priority: Any) -> None:
    """``Queue(name, max_priority=N)``: the queue is created with N + 1
    PinLater priorities (at most MAX_PRIORITIES) and Kombu priorities map
    onto them in order (``workers.channel.Channel._priority``)."""
    try:
        value = int(max_priority)
    except (TypeError, ValueError):
        raise ValueError(f"max_priority of queue {queue!r} must be a whole number, got {max_priority!r}") from None
    if not 0 <= value <= 255:
        raise ValueError(f"max_priority of queue {queue!r} must be from 0 to 255 (as AMQP's), got {value}")
    with _lock:
        _max_priorities[queue] = value


def max_priority(queue: str) -> int | None:
    return _max_priorities.get(queue)


def priorities_for(queue: str) -> int | None:
    """The number of PinLater priorities a declared max_priority asks for."""
    declared = _max_priorities.get(queue)
    return None if declared is None else min(declared + 1, MAX_PRIORITIES)


def spec_for(queue: str) -> QueueSpec | None:
    with _lock:
        return _specs.get(queue)


def queue_of_task(task_name: str) -> str | None:
    with _lock:
        for queue, spec in _specs.items():
            if spec.task_name == task_name:
                return queue
    return None


def route(name: str, args: Any = None, kwargs: Any = None, options: Any = None, task: Any = None,
          **kw: Any) -> dict[str, str] | None:
    """Celery router (``task_routes``): a PinLater task goes to its queue."""
    queue = queue_of_task(name)
    return {"queue": queue} if queue else None


def task_for_queue(queue: str) -> str:
    spec = spec_for(queue)
    return spec.task_name if spec is not None else queue


def queues() -> list[str]:
    with _lock:
        return sorted(_specs)
