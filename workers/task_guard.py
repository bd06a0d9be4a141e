"""Which deliveries a worker runs: the tasks their queue routes to, nothing else.

A job body is its producer's, and a Celery message stored in one
(``workers.message_format``) names its task in its own headers. Unchecked, a
producer allowed to enqueue on one queue could make a worker run any task the
worker has registered, Celery's canvas builtins among them (``celery.group``,
``celery.map``, ``celery.chord_unlock``...), which run or publish the
signatures their message carries under the worker's own PinLater identity: the
producer would gain the worker's grants. So the worker's channel checks each
claimed job before Celery's consumer sees it (``Channel._stored``):

* a queue a PinLater task owns (``workers.registry``: one task type per queue)
  runs that task only; a raw body there is that task by construction;
* a queue no task owns (Celery's default queue, or one a publish named with
  ``queue=``) runs the task its message names, as ``send_task`` by name needs,
  except Celery's own tasks other than the harmless ones below: granting such
  a queue grants every task its workers import;
* a message that names no task is refused: Celery would take a plain Kombu
  message's body for a protocol 1 task, whose name is in the body.

A refused job is never delivered: it ends FAILED at once (attempts set to
one, then a failure ACK: retrying a message that names the wrong task could
only be refused again), with the custom status ``refused: ...``, one warning
line without the body, and a count per queue and task in the worker's
``celery inspect stats`` (``pinlater_refused``).

Only a Celery worker checks (``enforce``, from ``workers.app`` when the worker
is set up): plain Kombu consumers run no tasks, and get every message as it
was published.

A message whose expiration passed before its delivery is not delivered
either (``workers.channel``): its job ends FAILED, and a worker tells the
task's result backend what Celery's own worker would (``expired``):
REVOKED, reason "expired", for a task that keeps its results, so that
``AsyncResult.get()`` raises rather than waiting for ever.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from workers import registry
from workers.message_format import StoredMessage

log = logging.getLogger(__name__)

# Celery's own tasks that run nothing their message names; ``celery beat``
# publishes ``celery.backend_cleanup`` to the default queue once a day.
HARMLESS_BUILTINS = frozenset({"celery.backend_cleanup", "celery.accumulate"})
_NAME_SHOWN = 80

_lock = threading.Lock()
_enforced = False
_refused: Counter[tuple[str, str]] = Counter()
# Stores a task's result as revoked: (its message's headers, reason).
_on_expired: Callable[[dict[str, Any], str], None] | None = None


def enforce(on_expired: Callable[[dict[str, Any], str], None] | None = None) -> None:
    """This process is a Celery worker: check every delivery from now on,
    and tell ``on_expired`` of each Celery task that expired undelivered."""
    global _enforced, _on_expired
    _enforced = True
    _on_expired = on_expired


def expired(stored: StoredMessage, descriptor: str) -> None:
    """``stored`` expired before its delivery (its job ends FAILED): its
    task's result, if it keeps one, says so."""
    hook = _on_expired
    if hook is None or not isinstance(stored.headers.get("id"), str) or not isinstance(stored.headers.get("task"), str):
        return
    try:
        hook(stored.headers, "expired")
    except Exception as exc:  # noqa: BLE001 -- the job has ended FAILED either way; the result is told best effort
        log.warning("job %s expired; its task's result could not be stored: %s: %s",
                    descriptor, type(exc).__name__, str(exc)[:200])


def enforced() -> bool:
    return _enforced


def _shown(name: str) -> str:
    return repr(name[:_NAME_SHOWN]) + ("..." if len(name) > _NAME_SHOWN else "")


def refusal(queue: str, stored: StoredMessage) -> str | None:
    """Why a worker must not run ``stored``, claimed from ``queue`` (a custom
    status, one line), or None when it may."""
    task = stored.headers.get("task")
    if not isinstance(task, str) or not task:
        return "refused: not a Celery task message (protocol 2 names its task in its headers)"
    spec = registry.spec_for(queue)
    if spec is not None:
        if task == spec.task_name:
            return None
        return f"refused: queue {queue} runs {spec.task_name} only, not {_shown(task)}"
    if task.startswith("celery.") and task not in HARMLESS_BUILTINS:
        return f"refused: {_shown(task)} runs what its message names, under the worker's identity"
    return None


def refused(queue: str, stored: StoredMessage, descriptor: str, reason: str) -> None:
    """Counts a refused delivery and says so once (never the body)."""
    task = stored.headers.get("task")
    name = task[:_NAME_SHOWN] if isinstance(task, str) else "(none)"
    with _lock:
        _refused[(queue, name)] += 1
    log.warning("job %s not run: %s", descriptor, reason)


def counts() -> dict[str, dict[str, int]]:
    """Refused deliveries of this process: {queue: {task: count}}."""
    with _lock:
        items = list(_refused.items())
    out: dict[str, dict[str, int]] = {}
    for (queue, task), n in items:
        out.setdefault(queue, {})[task] = n
    return out
