# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The Celery app of the workers, with PinLater as its broker.

    celery -A workers.app worker            # every PinLater task queue, and the default one
    celery -A workers.app worker -Q a,b     # or only these
    celery -A workers.app worker -X backfill   # or all but these
    python -m workers.flower --address=127.0.0.1   # Flower, with basic auth (workers.flower)

Every process that imports this module can use ``pinlater://`` broker URLs
(the transport alias is registered here), and its ``app`` is Celery's
current and default app there: ``@shared_task`` and ``current_app`` publish
to PinLater. Configuration, all from the environment (every variable, its
default and meaning: docs/configuration.md):

* ``PINLATER_*``: the job service (shards, control store...), as for the
  ``pinlater`` command;
* ``PINLATER_BUS_URL`` (default ``redis://127.0.0.1:16379/0``) and
  ``PINLATER_BUS_PREFIX``: Redis pub/sub for events, remote control,
  replies and wake-ups;
* ``PINLATER_RESULT_URL`` (default ``redis://127.0.0.1:16379/2``) and
  ``PINLATER_RESULT_EXPIRES_S``: Celery's result backend. Tasks ignore
  their results unless they say ``ignore_result=False``; those that keep
  them work with ``AsyncResult.get()``, group results and chords (the Redis
  backend joins a chord's header itself: no ``chord_unlock`` polling);
* ``PINLATER_CELERY_IMPORTS``: comma-separated task modules the workers
  import in place of the installed apps' (``workers.builtin_tasks``
  always). Unset, they import every installed app's task modules, as its
  manifest names them (``pinlater.kit.apps``).

Tasks use ``PinLaterTask`` (``workers.task``) as their base: one task type
per PinLater queue.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

from celery import Celery, bootsteps
from celery.signals import (
    celeryd_init,
    import_modules,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)
from kombu.entity import Exchange, Queue
from kombu.transport import TRANSPORT_ALIASES

from pinlater.kit import apps
from pinlater.kit.envsettings import read
from pinlater.observe import tracing
from workers import bulk, registry, task_guard
from workers.cancel import store_revoked
from workers.gc_policy import tune_gc
from workers.message_format import RAW_CONTENT_TYPE
from workers.publish_info import stamp, take_descriptor
from workers.raw_serializer import register_raw_serializer
from workers.settings import app_setting, parse_imports
from workers.task import PinLaterTask

TRANSPORT_ALIASES["pinlater"] = "workers.transport:Transport"
register_raw_serializer()

BUILTIN_IMPORTS = ("workers.builtin_tasks",)


def task_queue(name: str) -> Queue:
    # Each task queue gets its own direct exchange: a Queue without one would
    # bind to the default exchange.
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


class RefusedStats(bootsteps.StartStopStep):
    """``pinlater_refused`` in ``celery inspect stats`` (and Flower's worker
    page): the deliveries this worker refused, by queue and task
    (``workers.task_guard``). A start-stop step with nothing to start: only
    those join the consumer's steps, whose ``info`` makes the stats."""

    def info(self, parent: Any) -> dict[str, Any]:
        return {"pinlater_refused": task_guard.counts()}


class PinLaterCelery(Celery):
    """Celery whose ``send_task`` results carry ``descriptor``, the PinLater
    job the publish made (None when the message went to no task queue), as
    ``PinLaterTask.apply_async`` results do: a client that names a task
    without importing it gets the same handle on the job."""

    # Whether the installed apps' task modules are still to be added to
    # ``imports`` (``_import_apps``).
    imports_apps = False

    @contextlib.contextmanager
    def producer_or_acquire(self, producer: Any = None) -> Iterator[Any]:
        """Celery's, inside a bulk scope that takes a group's tasks: a
        ``group`` publishes them all in one of these, so their jobs go out
        with a few enqueue calls when it ends (``workers.bulk``)."""
        # The scope inside the producer's: its jobs go out before the
        # producer is released (after an error, its connection with it).
        with super().producer_or_acquire(producer) as bound, bulk.publishing(every=False):
            yield bound

    def send_task(self, name: str, *args: Any, **options: Any) -> Any:
        take_descriptor()
        # A task named, not imported: its result is ignored unless the caller
        # says so, as the app's tasks' are. Celery's default would subscribe
        # this process to the result of every such publish, for good.
        options.setdefault("ignore_result", self.conf.task_ignore_result)
        result = super().send_task(name, *args, **options)
        if result is not None:
            stamp(result)
        return result


def make_app(
    main: str = "workers",
    *,
    broker_url: str = "pinlater://",
    transport_options: dict[str, Any] | None = None,
    imports: tuple[str, ...] | None = None,
    **config: Any,
) -> Celery:
    imports_apps = False
    if imports is None:
        chosen: tuple[str, ...] | None = read(os.environ, "PINLATER_CELERY_IMPORTS", parse_imports, None)
        imports_apps = chosen is None
        imports = BUILTIN_IMPORTS + (chosen or ())
    # Not the current or default app: apps made here (tests make their own)
    # never capture ``current_app`` or ``@shared_task``; only the module's
    # ``app`` below does.
    app = PinLaterCelery(main, broker=broker_url, task_cls=PinLaterTask, set_as_current=False)
    app.imports_apps = imports_apps
    app.conf.update(
        broker_transport_options=dict(transport_options or {}),
        broker_connection_retry_on_startup=True,
        imports=imports,
        task_routes=(registry.route,),
        task_acks_late=True,
        task_serializer="json",
        accept_content=["json", RAW_CONTENT_TYPE],
        result_backend=app_setting("PINLATER_RESULT_URL"),
        result_expires=app_setting("PINLATER_RESULT_EXPIRES_S"),
        task_ignore_result=True,
        enable_utc=True,
        timezone="UTC",
        # Prefetch is a window of claimed jobs; the rest waits on the shards.
        worker_prefetch_multiplier=4,
        # Flower turns task events on when it runs; workers start quiet.
        worker_send_task_events=False,
        event_queue_expires=60,
        event_queue_ttl=5,
        # Adds the tasks' own periodic entries (run_every_s) to beat_schedule.
        beat_scheduler="workers.beat:PinLaterScheduler",
    )
    app.conf.update(config)
    app.steps["consumer"].add(RefusedStats)
    return app


def consume_task_queues(app: Celery, selected: list[str] | None = None,
                        excluded: list[str] | None = None) -> None:
    """Declares every PinLater task queue the imported tasks declare, each
    with its own direct exchange, before Celery applies ``-Q`` and ``-X``
    (``selected`` and ``excluded``). Without ``-Q``, a worker consumes all
    of them and Celery's default queue (``task_default_queue``, ``celery``),
    as a stock Celery worker does: ``send_task`` from a process that imports
    no task module, or a publish with no route, lands there, and the worker
    runs each message's named task. Celery's ``-X`` then takes its queues
    out of that selection; one naming no queue ends the worker with a
    one-line error, since a mistyped ``-X backfill`` would otherwise run the
    very queue it meant to leave to a worker of its own."""
    app.finalize(auto=True)
    queues = app.amqp.queues
    names = registry.queues()
    for name in names:
        if name not in queues:
            queues.add(task_queue(name))
    unknown = [name for name in excluded or () if name not in queues and name not in (selected or ())]
    if unknown:
        known = ", ".join(sorted(name for name in queues if registry.is_task_queue(name)))
        # SystemExit, not an error: Celery logs and goes on past a signal
        # handler's exceptions.
        raise SystemExit(f"error: -X {','.join(unknown)}: no such queue (known: {known})")
    if not selected and names:
        default = app.conf.task_default_queue
        if default in queues and registry.is_task_queue(default):
            names = sorted({*names, default})
        queues.select(names)


def _names(option: Any) -> list[str]:
    # ``celery worker`` passes -Q and -X as lists; ``Worker(queues="a,b")`` as text.
    if isinstance(option, str):
        option = option.split(",")
    return [name.strip() for name in option or () if name.strip()]


@import_modules.connect
def _import_apps(sender: Any = None, **_: Any) -> None:
    # The installed apps' task modules, read from their manifests when a
    # worker, beat or another celery command imports the task modules (just
    # before it does): a process that only imports this module loads no app.
    if isinstance(sender, PinLaterCelery) and sender.imports_apps:
        sender.imports_apps = False
        sender.conf.imports = (*sender.conf.imports, *apps.task_modules())


@celeryd_init.connect  # after the task modules' import, before Celery applies -Q and -X
def _select_queues(sender: Any = None, instance: Any = None, options: Any = None, **_: Any) -> None:
    if instance is not None and isinstance(instance.app.amqp.queues, dict):
        options = options or {}
        consume_task_queues(instance.app, _names(options.get("queues")), _names(options.get("exclude_queues")))


@worker_init.connect
def _guard_deliveries(sender: Any = None, **_: Any) -> None:
    # This process consumes as a Celery worker: it runs only the tasks each
    # queue routes to (plain Kombu consumers of other processes run none).
    worker_app = getattr(sender, "app", None)
    task_guard.enforce(on_expired=None if worker_app is None else partial(store_revoked, worker_app))


@worker_process_init.connect  # each process of the prefork pool
@worker_init.connect  # the worker's own process (the solo and thread pools run tasks there)
def _tune_gc(**_: Any) -> None:
    tune_gc()
    tracing.configure("pinlater-worker")


@worker_process_shutdown.connect
def _flush_traces(**_: Any) -> None:
    tracing.flush()


app = make_app()
# The project's app is Celery's current app (of the importing thread) and
# default app (of every other thread): ``@shared_task`` proxies and
# ``celery.current_app`` then publish to ``pinlater://`` in any process
# that imports this module, as they would with a stock broker.
app.set_current()
app.set_default()
