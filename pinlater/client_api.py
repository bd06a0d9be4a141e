"""The client interface shared by the in-process service (``JobService``)
and the remote one (``pinlater.thrift.client.ThriftClient``): application
code typed against ``PinLaterClient`` switches between them by
configuration alone (``pinlater.connect``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from pinlater.models import Ack, AckResult, Checkpoint, DequeuedJob, Job, JobInfo, ScanResult
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
    ) -> QueueConfig: ...

    def delete_queue(self, name: str, password: str | None) -> None: ...

    def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config, cached for ``config_ttl_s`` unless ``fresh``."""
        ...

    def update_queue(self, name: str, **changes: object) -> QueueConfig: ...

    # The switches every client has the same way: one change of update_queue.
    def set_rate(self, name: str, jobs_per_second: float | None) -> QueueConfig:
        return self.update_queue(name, max_dequeue_rate=jobs_per_second)

    def pause(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=True)

    def resume(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=False)

    def queue_names(self) -> set[str]: ...

    def enqueue(self, queue: str, jobs: Sequence[Job], *, idempotency_key: str | None = None) -> list[str]: ...

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

    def close(self) -> None: ...

    def __enter__(self) -> PinLaterClient: ...

    def __exit__(self, *exc: object) -> None: ...


CLIENT_METHODS = (
    "create_queue", "delete_queue", "queue_config", "update_queue", "set_rate", "pause", "resume",
    "queue_names", "enqueue", "dequeue", "ack", "checkpoint",
    "lookup", "count", "scan", "retry_failed", "delete_jobs",
)


class Call:
    """One call's arguments by parameter name, defaults filled in."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.__dict__.update(arguments)

    def __getattr__(self, name: str) -> Any:  # typed reads of the bound names
        raise AttributeError(name)


def declared(
    method: Callable[Concatenate[Any, P], R],
) -> Callable[[Callable[[S, Call], R]], Callable[Concatenate[S, P], R]]:
    """An implementation of ``method`` (a ``PinLaterClient`` method) whose
    signature is the declaration's, not restated: the body gets the call's
    arguments bound as the declaration names them, defaults filled in, and
    type checkers see the declared signature."""
    signature = inspect.signature(method)
    bind = _binder(signature)

    def wrap(body: Callable[[S, Call], R]) -> Callable[Concatenate[S, P], R]:
        @functools.wraps(body)
        def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return body(self, Call(bind(args, kwargs)))

        call.__signature__ = signature  # type: ignore[attr-defined]
        return call

    return wrap


def _binder(signature: inspect.Signature) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """Binds a call's arguments as ``signature`` (self left out) would, a
    dozen times faster than ``Signature.bind``: these are the hot calls."""
    params = list(signature.parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) for p in params):
        raise TypeError(f"declared() binds plain parameters only, not {signature}")
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    names = {p.name for p in params}
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    required = names - set(defaults)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(positional):
            raise TypeError(f"takes {len(positional)} positional arguments but {len(args)} were given")
        values = dict(defaults)
        values.update(zip(positional, args, strict=False))
        if kwargs:
            unknown = kwargs.keys() - names
            twice = kwargs.keys() & set(positional[: len(args)])
            if unknown or twice:
                raise TypeError(f"unexpected or repeated arguments: {sorted(unknown | twice)}")
            values.update(kwargs)
        if len(values) < len(names):
            raise TypeError(f"missing arguments: {sorted(required - values.keys())}")
        return values

    return bind
