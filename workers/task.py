# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""``PinLaterTask``: the base class of tasks whose jobs live in PinLater.

    @app.task(pinlater_queue="send_email", retry_policy=RetryPolicy.linear(30_000, retries=5))
    def send_email(user_id): ...

* One task type per queue (``pinlater_queue=``; default: the task name made
  a queue name). A job enqueued on that queue by non-Celery code runs this task
  with the job body (bytes) as its only argument.
* Late ACKs: the job is ACKed when the task returns, so a worker that dies
  leaves it to the claim timeout. An exception is a failure ACK: PinLater
  retries it on the retry policy (the task's ``retry_policy`` if given,
  else the queue's) and marks it FAILED after its last attempt. To Celery
  an attempt with more to come is a retry (its result RETRY, ``on_retry``
  called); only the last attempt's exception stores FAILURE, runs the
  errbacks and fails a chord.
* ``self.retry(countdown=...)`` is a failure ACK with that delay: the same
  job runs again (it spends an attempt), no new message is published.
* ``self.heartbeat()`` keeps a long task's claim; ``auto_heartbeat`` (on by
  default) does it from a thread every third of the claim timeout.
* Cancel (``cancel``, ``pinlater cancel``): a cancelled running job has
  ended FAILED at once; its task learns it from ``self.heartbeat()`` or,
  with ``auto_heartbeat``, ``self.raise_if_cancelled()`` (no call), both of
  which raise ``JobCancelled``. ``revoke(task_id)`` through Celery's remote
  control (``terminate=True`` stops a running one by force) ends the job
  FAILED ``[cancelled]`` too, never retried.
* ``priorities``, ``max_dequeue_rate``, ``max_running`` (at most this many
  of its jobs running at once over every worker), ``claim_timeout_ms`` and
  ``retry_policy`` configure the queue when it is first created; after that
  the queue's config is the operators' (``pinlater set-rate``,
  ``pinlater set-concurrency`` ...).
  ``retry_policy`` also stays the task's own (its delays and attempts win
  over the queue's); ``queue_retry_policy`` only seeds the queue's.
* ``self.refuse(reason)`` fails a job that can never succeed (a body the
  task cannot parse) at once: FAILED, with no retries spent on it.
* A delivered message that carries a canvas (callbacks, errbacks, a chain
  or a chord) is refused so, unless the task says ``accepts_canvas=True``:
  its signatures would be published under the worker's identity.
* ``run_every_s`` (with ``run_every_args``) makes ``celery beat`` publish
  the task periodically (``workers.app`` adds it to the beat schedule).
* Fairness keys: ``apply_async(..., fairness_key="tenant-42")`` gives one
  job its key; ``fairness_key_of`` (a function of the task's arguments,
  returning the key as text, or None for none) gives every publish of the
  task one. Among the runnable jobs of a priority, workers are served keys
  in turn, so one key's backlog does not hold back another's jobs.
* Unique jobs: ``unique = True`` makes each publish's unique key its
  arguments (equal arguments, one key); ``unique_of`` (a function of the
  arguments returning the key as text, or None for none) chooses it;
  ``apply_async(..., unique_key=K)`` sets one publish's. While a job of the
  queue with that key is pending or running, a publish makes no job: its
  result's ``descriptor`` is that job's and ``duplicate`` is True.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NoReturn

from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from celery.signals import task_postrun, task_prerun

from pinlater.errors import PinLaterError
from pinlater.models import Checkpoint
from pinlater.observe import tracing
from pinlater.retry import RetryPolicy
from workers import bulk, direct_publish, registry, task_guard
from workers import tracing as task_tracing
from workers.batches import BATCH_KWARG, batch_counts
from workers.client import queue_config, shared_client
from workers.heartbeat import CANCELLED, HEARTBEATS, HELD, Running, beat
from workers.options import check_publish_options
from workers.pid import current_pid
from workers.publish_info import stamp, take_descriptor
from workers.settings import TransportSettings

log = logging.getLogger(__name__)

# apply_async's parameters that differ per call, or that the direct path
# does not handle: a delay_many given any publishes each call alone.
_PER_CALL_OPTIONS = frozenset({"task_id", "shadow", "link", "link_error", "idempotency_key", "fairness_key",
                               "unique_key"})


class JobRefused(Exception):
    """A job its task can never run (``PinLaterTask.refuse``)."""


class JobCancelled(Exception):
    """The running job was cancelled (``cancel``, ``pinlater cancel``): raised
    by ``self.heartbeat()`` and ``self.raise_if_cancelled()``. The job has
    ended FAILED already, its status ``[cancelled]``: a task may catch this
    to clean up, then should end (its ACK is stale, and nothing is retried)."""


# Exceptions that end a job or its attempt as they are, whatever its attempts left.
_ENDINGS = (Retry, Ignore, Reject, JobRefused, JobCancelled)


def attempts_left(request: Any) -> int:
    """How many attempts the running job has, this one included (0: the
    task is not running a PinLater job)."""
    info = getattr(request, "pinlater", None)
    if not info or getattr(request, "is_eager", False):
        return 0
    return int(info.get("attempts_remaining", 1))


class PinLaterTask(Task):
    Request = "workers.request:PinLaterRequest"
    acks_late = True
    acks_on_failure = False
    acks_on_timeout = False
    reject_on_worker_lost = False
    # The PinLater queue of this task (routed by workers.app's router, since
    # Celery 6 drops the ``queue`` task attribute; ``queue=`` still works).
    pinlater_queue: str | None = None
    # Queue config used only when the queue is first created.
    retry_policy: RetryPolicy | None = None
    # The queue's retry policy when it is first created, without the task
    # overriding it afterwards: retry delays and attempts then follow the
    # queue's config, which operators can change at run time.
    queue_retry_policy: RetryPolicy | None = None
    priorities: int | None = None
    max_dequeue_rate: float | None = None
    max_running: int | None = None
    claim_timeout_ms: int | None = None
    auto_heartbeat: bool = True
    # The fairness key of a publish, from the task's arguments (None: none).
    fairness_key_of: Callable[..., str | int | None] | None = None
    # Unique jobs: ``unique = True`` keys each publish by its arguments;
    # ``unique_of`` by a function of them (None: not unique).
    unique: bool = False
    unique_of: Callable[..., str | int | None] | None = None
    # Published by ``celery beat`` every this many seconds, with these args.
    run_every_s: float | None = None
    run_every_args: tuple[Any, ...] = ()
    # Whether a delivered message of this task may carry a canvas (see
    # ``__call__``): a task whose producers are trusted with every queue
    # its callbacks may name opts in.
    accepts_canvas: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if (not self.accepts_canvas and getattr(request, "pinlater", None) and task_guard.enforced()
                and (request.callbacks or request.errbacks or request.chain or request.chord)):
            # The canvas is its producer's: run, the worker would publish its
            # signatures (on success, on failure, or as the chain's next step)
            # under the worker's own PinLater identity, into queues the
            # producer may not reach. Dropped before the refusal's failure,
            # so that no errback is published either.
            request.callbacks = request.errbacks = request.chain = request.chord = None
            self.refuse(f"refused: its message carries callbacks, errbacks, a chain or a chord, which {self.name} "
                        "does not accept (accepts_canvas)")
        batch = kwargs.get(BATCH_KWARG)
        if isinstance(batch, str) and getattr(request, "pinlater", None):
            # A batch's callback (workers.batches): its batch's counts, read now that it has ended.
            kwargs[BATCH_KWARG] = batch_counts(self.pinlater_client.batch_status(batch))
        try:
            return super().__call__(*args, **kwargs)
        except _ENDINGS:
            raise
        except Exception as exc:
            if attempts_left(request) > 1:
                # The job service runs the job again: to Celery a retry, not
                # the task's end (no FAILURE stored, no errback run, no chord
                # part counted); the last attempt's exception is its end.
                raise Retry(exc=exc) from exc
            raise

    @classmethod
    def on_bound(cls, app: Any) -> None:
        if cls.name is None or cls.name.startswith("celery."):
            # Celery's own tasks (chord_unlock, chain...) get this base too
            # since it is the app's task class; they keep Celery's routing.
            return
        queue = cls.pinlater_queue or cls.__dict__.get("queue") or registry.queue_for_task(cls.name)
        cls.pinlater_queue = queue
        create: dict[str, Any] = {}
        for key in ("priorities", "max_dequeue_rate", "max_running", "claim_timeout_ms"):
            if getattr(cls, key) is not None:
                create[key] = getattr(cls, key)
        if cls.retry_policy is not None:
            create["retry"] = cls.retry_policy
        elif cls.queue_retry_policy is not None:
            create["retry"] = cls.queue_retry_policy
        registry.register(queue, registry.QueueSpec(cls.name, create))

    @property
    def pinlater_client(self) -> Any:
        # Settings are read from the environment and transport options once
        # per task object and process (as the transport reads them once), not
        # for every task run.
        cached = self.__dict__.get("_pinlater_client")
        if cached is None or cached[0] != current_pid():
            options = self.app.conf.broker_transport_options
            cached = self.__dict__["_pinlater_client"] = (
                current_pid(), shared_client(TransportSettings.from_options(options).pinlater)
            )
        return cached[1]

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Any = None, producer: Any = None,
                    link: Any = None, link_error: Any = None, shadow: Any = None, *,
                    idempotency_key: str | None = None, fairness_key: str | None = None,
                    unique_key: str | None = None, **options: Any) -> Any:
        """As Celery's; the result also has ``descriptor``, the PinLater job.
        ``idempotency_key``: a publish with a key already used on this queue
        within the job service's window (``PINLATER_IDEMPOTENCY_WINDOW_MS``)
        makes no new job, and its descriptor is the first one's; a task that
        is run again after a crash then does not publish its successors twice.
        ``fairness_key``: the job's fairness key (default: ``fairness_key_of``
        of the arguments, if the task has one). ``unique_key``: the job's
        unique key (default: as the task's ``unique``/``unique_of`` say);
        while a job of the queue with that key is pending or running, the
        publish makes none, and the result's ``descriptor`` is that job's,
        with ``duplicate`` True. A bad countdown, eta, expires, priority,
        queue or headers is a TypeError or ValueError naming it
        (``workers.options``)."""
        check_publish_options(options)
        key_of = type(self).fairness_key_of
        fkey = fairness_key if fairness_key is not None or key_of is None else key_of(*(args or ()), **(kwargs or {}))
        ukey = unique_key if unique_key is not None else self._unique_key(args, kwargs)
        if fkey is not None or ukey is not None:
            headers = dict(options.pop("headers", None) or {})
            if fkey is not None:
                headers["pinlater_key"] = str(fkey) if isinstance(fkey, int) else fkey
            if ukey is not None:
                headers["pinlater_unique"] = ukey
            options["headers"] = headers
        if tracing.ON or tracing.configure():
            with task_tracing.publishing(self.name, options):
                return self._publish(args, kwargs, task_id, producer, link, link_error, shadow, idempotency_key,
                                     options)
        return self._publish(args, kwargs, task_id, producer, link, link_error, shadow, idempotency_key, options)

    def delay_many(self, calls: Iterable[Any], **options: Any) -> list[Any]:
        """Publishes one job per call, with a few enqueue calls of up to a
        thousand jobs (``workers.bulk``): each call is the task's arguments,
        a tuple (``(user,)``) or a dict of keyword arguments, and ``options``
        are ``apply_async``'s for every one. Their results, in order, with
        ``descriptor``, once every job is stored. A call of the wrong shape,
        or whose arguments the task does not take, is a TypeError naming it,
        raised before any call is published, as is a bad option."""
        check_publish_options(options)
        checked = self._checked_calls(calls)
        results = []
        with bulk.publishing(), self.app.producer_or_acquire() as producer:
            prepared = self._prepared_for_many(producer, options)
            for args, kwargs in checked:
                if prepared is None:
                    results.append(self.apply_async(args, kwargs, producer=producer, **options))
                    continue
                take_descriptor()
                result = prepared.send(args, kwargs, None, None, checked=True)
                stamp(result)
                results.append(result)
        return results

    def _checked_calls(self, calls: Iterable[Any]) -> list[tuple[tuple[Any, ...], dict[str, Any] | None]]:
        """``delay_many``'s calls as (args, kwargs), each checked against the
        task's signature as a publish checks it (``typing``)."""
        check = getattr(self, "__header__", None) if self.typing else None
        checked: list[tuple[tuple[Any, ...], dict[str, Any] | None]] = []
        for i, call in enumerate(calls):
            if isinstance(call, dict):
                if not all(isinstance(k, str) for k in call):
                    raise TypeError(f"delay_many: call {i}: keyword arguments are named by text")
                args, kwargs = (), call
            elif isinstance(call, tuple | list):
                args, kwargs = tuple(call), None
            else:
                raise TypeError(f"delay_many: call {i} must be a tuple or list of arguments or a dict of keyword "
                                f"arguments, got {type(call).__name__}")
            if check is not None:
                try:
                    check(*args, **(kwargs or {}))
                except TypeError as exc:
                    raise TypeError(f"delay_many: call {i}: {exc}") from None
            checked.append((args, kwargs))
        return checked

    def _prepared_for_many(self, producer: Any, options: dict[str, Any]) -> direct_publish.Prepared | None:
        """When every call of a ``delay_many`` would take the direct path with
        the same options and route (no per-call keys, no tracing, a route that
        ignores the arguments), that path decided once; else None, and each
        call is an ``apply_async``."""
        cls = type(self)
        if cls.fairness_key_of is not None or cls.unique or cls.unique_of is not None:
            return None
        if _PER_CALL_OPTIONS & options.keys() or tracing.ON or tracing.configure():
            return None
        options = self._job_headers(dict(options), None)
        if not self._on_pinlater_broker() or not direct_publish.usable(self, None, None, options):
            return None
        return direct_publish.prepare(self, producer, options)

    def _unique_key(self, args: Any, kwargs: Any) -> str | None:
        """A publish's unique key as the task says: by ``unique_of`` of the
        arguments, or with ``unique`` by the arguments themselves (a hash
        of their JSON, keys sorted, so equal arguments make one key)."""
        cls = type(self)
        if cls.unique_of is not None:
            key = cls.unique_of(*(args or ()), **(kwargs or {}))
            return str(key) if isinstance(key, int) else key
        if not cls.unique:
            return None
        text = json.dumps([self.name, list(args or ()), kwargs or {}], sort_keys=True, default=repr)
        return "args:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _publish(self, args: Any, kwargs: Any, task_id: Any, producer: Any, link: Any, link_error: Any,
                 shadow: Any, idempotency_key: str | None, options: dict[str, Any]) -> Any:
        options = self._job_headers(options, idempotency_key)
        on_pinlater = self._on_pinlater_broker()
        if on_pinlater and direct_publish.usable(self, link, link_error, options):
            take_descriptor()
            result = direct_publish.publish(self, args, kwargs, task_id, producer, shadow, options)
            if result is not None:
                stamp(result)
                return result
        if "declare" not in options and "exchange" not in options and on_pinlater:
            # Nothing to declare before a publish: a task queue that does not
            # exist yet is created by the transport when the enqueue finds it
            # missing, and transient queues are declared by their consumers.
            # Saves Kombu binding copies of the queue and exchange per publish.
            # A publish to a named exchange still declares: the exchange's
            # bindings in this process are what route it to a task queue.
            options["declare"] = []
        take_descriptor()
        result = super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        if result is not None:
            # An app made by workers.app.make_app has already set it (its
            # send_task takes the descriptor); any other app has not.
            stamp(result)
        return result

    def _job_headers(self, options: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        """``options`` with the headers that carry the job's attempts (the
        task's retry policy) and idempotency key to the transport."""
        if self.retry_policy is not None or idempotency_key is not None:
            headers = dict(options.pop("headers", None) or {})
            if self.retry_policy is not None:
                headers.setdefault("pinlater_attempts", self.retry_policy.attempts_allowed)
            if idempotency_key is not None:
                headers["pinlater_idempotency_key"] = idempotency_key
            options["headers"] = headers
        return options

    def _on_pinlater_broker(self) -> bool:
        # Once per task object (each app binds its own): an app's broker does
        # not change once it publishes, and reading it costs a few lookups.
        known: bool | None = self.__dict__.get("_pinlater_broker")
        if known is None:
            conf = self.app.conf
            known = self.__dict__["_pinlater_broker"] = str(
                conf.broker_write_url or conf.broker_url or ""
            ).startswith("pinlater:")
            if known:
                # Publishes declare nothing, so the app's queues declared with
                # max_priority are made known here: their priority mapping.
                for queue in self.app.amqp.queues.values():
                    if queue.max_priority is not None:
                        registry.declare_max_priority(registry.job_queue_name(queue.name), queue.max_priority)
        return known

    def retry(self, args: Any = None, kwargs: Any = None, exc: BaseException | None = None, throw: bool = True,
              eta: datetime | None = None, countdown: float | None = None, max_retries: int | None = None,
              **options: Any) -> Any:
        """Runs this job again after ``countdown`` seconds (or at ``eta``; with
        neither, after the retry policy's delay), spending one attempt. The
        job's attempts, not ``max_retries``, decide when it is FAILED."""
        info = getattr(self.request, "pinlater", None)
        if not info or self.request.is_eager:
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        if args is not None or kwargs is not None:
            raise ValueError("a PinLater retry runs the same job: its arguments cannot change")
        check_publish_options({"countdown": countdown, "eta": eta})
        ret = Retry(exc=exc, when=eta if eta is not None else countdown)
        if throw:
            raise ret
        return ret

    def refuse(self, reason: str) -> NoReturn:
        """Fails this job for good: its attempts are set to one (a checkpoint
        of the claim), so the failure ACK that follows makes it FAILED.
        Retrying a body that cannot be parsed would only repeat the error."""
        info = getattr(self.request, "pinlater", None)
        if info and not self.request.is_eager:
            queue = info["descriptor"].split(":", 1)[0]
            try:
                self.pinlater_client.checkpoint(
                    queue, [Checkpoint(info["descriptor"], attempts_allowed=1, claim=info.get("claim"))],
                    source=info["source"],
                )
            except PinLaterError as exc:
                log.warning("could not end %s at once (it will be retried): %s", info["descriptor"], exc)
        raise JobRefused(reason)

    def heartbeat(self) -> bool:
        """Keeps this job's claim; False if it was already lost (timed out).
        Raises JobCancelled if the job was cancelled."""
        info = getattr(self.request, "pinlater", None)
        if not info:
            return True
        queue = info["descriptor"].split(":", 1)[0]
        found = beat(self.pinlater_client, queue, info["descriptor"], info["source"], info.get("claim"))
        if found == CANCELLED:
            raise JobCancelled(f"job {info['descriptor']} was cancelled")
        return found == HELD

    def raise_if_cancelled(self) -> None:
        """Raises JobCancelled if an automatic heartbeat (``auto_heartbeat``)
        found this job cancelled: costs no call, so a long task may check
        it often; the news is at most one heartbeat interval (a third of the
        claim timeout) old."""
        info = getattr(self.request, "pinlater", None)
        if info and self.auto_heartbeat and HEARTBEATS.cancelled(threading.get_ident()):
            raise JobCancelled(f"job {info['descriptor']} was cancelled")


@task_prerun.connect
def _start_heartbeats(sender: Any = None, **_: Any) -> None:
    if not isinstance(sender, PinLaterTask) or not sender.auto_heartbeat:
        return
    info = getattr(sender.request, "pinlater", None)
    if not info:
        return
    client = sender.pinlater_client
    queue = info["descriptor"].split(":", 1)[0]
    interval = queue_config(client, queue).claim_timeout_ms / 1000 / 3
    HEARTBEATS.start(
        threading.get_ident(),
        Running(queue, info["descriptor"], info["source"], interval, client, time.monotonic() + interval,
                info.get("claim")),
    )


@task_postrun.connect
def _stop_heartbeats(sender: Any = None, **_: Any) -> None:
    if isinstance(sender, PinLaterTask) and sender.auto_heartbeat:
        HEARTBEATS.stop(threading.get_ident())
