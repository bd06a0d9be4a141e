"""The client interface shared by the in-process service (``JobService``)
and the remote one (``pinlater.thrift.client.ThriftClient``): application
code typed against ``PinLaterClient`` switches between them by
configuration alone (``pinlater.connect``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from pinlater.models import (
    Ack,
    AckResult,
    BatchStatus,
    CancelResult,
    Checkpoint,
    DequeuedJob,
    Enqueued,
    Job,
    JobInfo,
    ScanResult,
)
from pinlater.states import JobState

if TYPE_CHECKING:
    from pinlater.queue_config import QueueConfig
    from pinlater.retry import RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class PinLaterClient(Protocol):
    """What a client offers. The in-process service and the Thrift client
    subclass it, inheriting the methods written here once."""

    def create_queue(
        self,
        name: str,
        *,
        priorities: int | None = None,
        max_dequeue_rate: float | None = None,
        claim_timeout_ms: int | None = None,
        retry: RetryPolicy | None = None,
        succeeded_retention_ms: int | None = None,
        failed_retention_ms: int | None = None,
        max_running: int | None = None,
    ) -> QueueConfig: ...

    def delete_queue(self, name: str, password: str | None) -> None: ...

    def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config, cached for ``config_ttl_s`` unless ``fresh``."""
        ...

    def update_queue(self, name: str, **changes: object) -> QueueConfig: ...

    # The switches every client has the same way: one change of update_queue.
    def set_rate(self, name: str, jobs_per_second: float | None) -> QueueConfig:
        return self.update_queue(name, max_dequeue_rate=jobs_per_second)

    def set_concurrency(self, name: str, max_running: int | None) -> QueueConfig:
        """At most ``max_running`` jobs of the queue RUNNING at once (None: no cap)."""
        return self.update_queue(name, max_running=max_running)

    def set_key_rate(self, name: str, key_rate: float | None) -> QueueConfig:
        """At most ``key_rate`` jobs per second per fairness key (None: unlimited)."""
        return self.update_queue(name, key_rate=key_rate)

    def set_key_concurrency(self, name: str, key_max_running: int | None) -> QueueConfig:
        """At most ``key_max_running`` jobs of each fairness key RUNNING at
        once (None: no cap)."""
        return self.update_queue(name, key_max_running=key_max_running)

    def pause(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=True)

    def resume(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=False)

    def queue_names(self) -> set[str]: ...

    def enqueue(
        self, queue: str, jobs: Sequence[Job], *, idempotency_key: str | None = None, batch: str | None = None
    ) -> Enqueued: ...

    def dequeue(
        self,
        queue: str,
        limit: int,
        *,
        source: str | None = None,
        dry_run: bool = False,
        coverage: float = 1.0,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
    ) -> list[DequeuedJob]: ...

    def ack(
        self,
        queue: str,
        *,
        succeeded: Sequence[Ack] = (),
        failed: Sequence[Ack] = (),
        source: str | None = None,
    ) -> AckResult:
        """Per descriptor: ``acked`` (applied) or ``stale`` (the caller no
        longer holds the claim). Raises ``AckNotApplied`` (with the same
        result, ``unapplied`` filled) when some job's shard was unreachable."""
        ...

    def checkpoint(
        self, queue: str, checkpoints: Sequence[Checkpoint], *, source: str | None = None
    ) -> AckResult: ...

    def lookup(self, descriptors: Sequence[str], *, include_body: bool = False) -> dict[str, JobInfo]: ...

    def count(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        body_regex: str | None = None,
    ) -> int: ...

    def scan(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        continuation: str = "0",
        limit: int = 100,
        body_regex: str | None = None,
        include_body: bool = False,
    ) -> ScanResult: ...

    def retry_failed(
        self,
        queue: str,
        *,
        priority: int | None = None,
        attempts: int = 1,
        run_after_ms: int | None = None,
        limit: int = 1000,
    ) -> int: ...

    def delete_jobs(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        body_regex: str | None = None,
        limit: int = 1000,
    ) -> int: ...

    def create_batch(
        self, callback_queue: str, callback: Job, *, description: str = "", batch: str | None = None
    ) -> str:
        """A new batch; its id (``batch`` if given, from
        ``pinlater.models.new_batch_id(callback_queue)``: a caller that must
        name the batch in the callback's body chooses it first).
        ``callback`` is stored now and runs once every job of the batch has
        ended, after ``seal_batch``: enqueue jobs with ``batch=`` before
        sealing, or from a running job of the batch at any time before that
        job's ACK."""
        ...

    def seal_batch(self, batch: str) -> BatchStatus:
        """No more jobs from the batch's maker: its callback runs once every
        job it holds has ended (at once, if they all have)."""
        ...

    def batch_status(self, batch: str) -> BatchStatus:
        """The batch's progress."""
        ...

    def cancel_batch(self, batch: str) -> CancelResult:
        """Cancels every job of the batch that has not ended, and its
        callback; the batch joins no more jobs."""
        ...

    def cancel(self, queue: str, descriptors: Sequence[str]) -> CancelResult:
        """Ends these jobs of ``queue`` now: a PENDING one never runs, a
        RUNNING one ends FAILED at once and its worker learns it at its next
        heartbeat or checkpoint; neither is retried. A finished job is left
        as it is (reported ``finished``)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> PinLaterClient: ...

    def __exit__(self, *exc: object) -> None: ...


CLIENT_METHODS = (
    "create_queue", "delete_queue", "queue_config", "update_queue", "set_rate", "pause", "resume",
    "queue_names", "enqueue", "dequeue", "ack", "checkpoint",
    "lookup", "count", "scan", "retry_failed", "delete_jobs", "cancel",
)


class Call(SimpleNamespace):
    """One call's arguments by parameter name, defaults filled in. Reads
    are typed ``Any``: the declaration is where the types are written."""


def declared(
    method: Callable[Concatenate[Any, P], R],
) -> Callable[[Callable[[S, Call], R]], Callable[Concatenate[S, P], R]]:
    """An implementation of ``method`` (a ``PinLaterClient`` method) whose
    signature is the declaration's, not restated: the body gets the call's
    arguments bound as the declaration names them, defaults filled in, and
    type checkers see the declared signature."""
    signature = inspect.signature(method)

    def wrap(body: Callable[[S, Call], R]) -> Callable[Concatenate[S, P], R]:
        call: Callable[Concatenate[S, P], R] = _forwarder(method.__name__, signature, body)
        functools.update_wrapper(call, body)
        call.__signature__ = signature  # type: ignore[attr-defined]
        return call

    return wrap


def _forwarder(name: str, signature: inspect.Signature, body: Callable[..., Any]) -> Any:
    """A function with ``signature`` whose one statement is ``body(self,
    Call(...))``. It is made from source once, as ``dataclasses`` makes an
    ``__init__``, so that Python binds each call's arguments itself: its own
    errors for a bad call, and no binding written here to run per call (these
    are the hot calls)."""
    params = list(signature.parameters.values())
    namespace: dict[str, Any] = {"_body": body, "_Call": Call}
    listed: list[str] = []
    for param in params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) or not param.name.isidentifier():
            raise TypeError(f"declared() takes plain named parameters only, not {signature}")
        if param.kind is param.KEYWORD_ONLY and "*" not in listed:
            listed.append("*")
        if param.default is param.empty:
            listed.append(param.name)
        else:
            namespace[f"_default_{param.name}"] = param.default
            listed.append(f"{param.name}=_default_{param.name}")
    this, *rest = (param.name for param in params)
    arguments = ", ".join(f"{n}={n}" for n in rest)
    source = f"def {name}({', '.join(listed)}):\n    return _body({this}, _Call({arguments}))\n"
    exec(compile(source, f"<declared {name}>", "exec"), namespace)
    return namespace[name]
