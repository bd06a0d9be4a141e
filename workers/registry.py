"""Which task runs each PinLater queue, and the config a queue gets when
it is first created: one task type per queue.

Tasks register here when they are bound to an app (``PinLaterTask.on_bound``),
in every process that imports them; the transport reads it to name the task
of a raw job body and to create missing queues. A process-wide table rather
than a transport option because transport options end up in ``inspect
conf`` replies, which must stay JSON.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from pinlater.queue_config import QUEUE_NAME_MAX

_TASK_QUEUE = re.compile(rf"^[A-Za-z0-9_]{{1,{QUEUE_NAME_MAX}}}$")


def is_task_queue(name: str) -> bool:
    """PinLater queue names are letters, digits and underscore; every queue
    Celery makes for itself (``host.celery.pidbox``, ``celeryev.UUID``,
    ``UUID.reply.celery.pidbox``) has a dot, so it is transient traffic."""
    return bool(_TASK_QUEUE.match(name))


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
