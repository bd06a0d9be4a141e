"""What one call's arguments may hold, checked on its frame before anything
is decoded (``pinlater.thrift.walk.check_body``).

thriftpy2's decoder builds an object for every field and list item it
knows, holding the GIL: a list of empty structs costs ~150 bytes and ~2 µs
per byte of the frame. The calls' own limits (jobs per call, descriptors
per lookup) used to be checked only after that. Here they bound the frame:

* each method's own lists hold at most what the call accepts, and more is
  answered with the error the call would give after decoding (an enqueue
  of 1,001 jobs: ENQUEUE_REJECTED "1001 jobs in one call; ...");
* any other container (an unknown extension field, a list sent with
  another element type, which the decoder skips) holds at most
  ``OTHER_ITEMS`` items;
* the whole message holds at most its lists' items, ``PER_ITEM`` fields
  for each of their structs, and ``BASE`` struct fields and container
  items more, so that walking and decoding it take a bounded time
  whatever its size.

Every container field of every method's arguments has its limit here; a
test checks that against the IDL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pinlater.errors import EnqueueRejected, InvalidRequest, PinLaterError
from pinlater.retry import MAX_RETRIES
from pinlater.settings import Settings
from pinlater.thrift import STRUCTS
from pinlater.thrift.walk import T_LIST, T_SET, T_STRING, T_STRUCT, Bounds, Items, OverLimit, Shape
from pinlater.validation import MAX_LIMIT, check_batch

# Items of a container that is none of the call's own lists: the IDL's
# requests have no other, so this only caps what the decoder skips.
OTHER_ITEMS = 64
# Fields of one item of a call's own list (with the extensions' fields a
# job has 8, an ACK 4, a checkpoint 7), with room for fields added later.
PER_ITEM = 16
# Fields and items outside the call's own lists: the arguments, the
# context, a queue config with its retry policy are a few dozen.
BASE = 1024
# thriftpy2 tells binary from string; on the binary protocol's wire both are T_STRING.
_BINARY = 18


@dataclass(frozen=True, slots=True)
class Limit:
    """One of a call's own limits: at most ``limit`` of ``what``, and
    ``refuse(count)``, the error the call gives for ``count`` of them."""

    what: str
    limit: int
    refuse: Callable[[int], Exception]


def _batch(what: str, limit: int, error: type[PinLaterError] = InvalidRequest,
           setting: str | None = "PINLATER_MAX_JOBS_PER_CALL") -> Limit:
    """A limit the service checks with ``check_batch``: the same error."""

    def refuse(count: int) -> PinLaterError:
        try:
            check_batch(count, limit, what, error, setting)
        except PinLaterError as exc:
            return exc
        return error(f"{count} {what} in one call; the limit is {limit}")

    return Limit(what, limit, refuse)


def _delays() -> Limit:
    def refuse(count: int) -> PinLaterError:
        return InvalidRequest(f"{count} retry delays; a retry policy has at most {MAX_RETRIES} retries, "
                              "each with one delay")

    return Limit("retry delays", MAX_RETRIES, refuse)


def call_lists(settings: Settings) -> dict[str, list[tuple[tuple[str, ...], Limit]]]:
    """Per method, its arguments' lists (as the path of field names from
    the argument struct) and the limit of each: the limits the job service
    checks the call against once it is decoded."""
    per_call = settings.max_jobs_per_call
    acks = _batch("ACKs", per_call)  # succeeded and failed together
    checkpoints = _batch("checkpoints", per_call)
    delays = _delays()
    return {
        "enqueueJobs": [(("request", "jobs"), _batch("jobs", per_call, EnqueueRejected))],
        "dequeueJobs": [(("request", "jobAckRequest", "jobsSucceeded"), acks),
                        (("request", "jobAckRequest", "jobsFailed"), acks)],
        "ackDequeuedJobs": [(("request", "jobsSucceeded"), acks), (("request", "jobsFailed"), acks)],
        "ackDequeuedJobsWithResult": [(("request", "jobsSucceeded"), acks), (("request", "jobsFailed"), acks)],
        "checkpointJobs": [(("request", "requests"), checkpoints)],
        "checkpointJobsWithResult": [(("request", "requests"), checkpoints)],
        "lookupJobs": [(("request", "jobDescriptors"), _batch("descriptors", MAX_LIMIT, setting=None))],
        "cancelJobs": [(("request", "jobDescriptors"), _batch("descriptors", per_call))],
        "createQueueWithConfig": [(("config", "retryPolicy", "delaysMillis"), delays)],
        "updateQueueConfig": [(("update", "retryPolicy", "delaysMillis"), delays)],
    }


@dataclass(frozen=True, slots=True)
class CallBounds:
    """A method's bounds, and the errors of a frame over them."""

    method: str
    bounds: Bounds
    limits: dict[str, Limit]
    # Of a frame over the bounds that are not one of the call's own limits.
    error: Callable[[str], Exception]

    def refusal(self, exc: OverLimit) -> Exception:
        limit = self.limits.get(exc.what)
        if limit is not None:
            return limit.refuse(exc.count)
        return self.error(f"{self.method} refused: {exc}")


def call_bounds(settings: Settings) -> dict[str, CallBounds]:
    """Every job service method's bounds under ``settings``."""
    return bounds_of(STRUCTS, call_lists(settings),
                     lambda method: EnqueueRejected if method == "enqueueJobs" else InvalidRequest)


def bounds_of(structs: dict[str, tuple[Any, Any]], lists: dict[str, list[tuple[tuple[str, ...], Limit]]],
              error: Callable[[str], Callable[[str], Exception]]) -> dict[str, CallBounds]:
    """The bounds of every method of ``structs`` (method -> its argument
    and result structs): ``lists``, per method, its own lists (the path of
    field names from the argument struct) and their limits; ``error``, per
    method, the error of a frame over the bounds that are not those."""
    out = {}
    for method, (args_cls, _) in structs.items():
        shape: Shape = {}
        limits: dict[str, Limit] = {}
        item_elements: dict[str, int] = {}
        for path, limit in lists.get(method, []):
            struct_items = _add(shape, args_cls, path, limit)
            limits[limit.what] = limit
            per_item = 1 + (PER_ITEM if struct_items else 0)
            item_elements[limit.what] = max(item_elements.get(limit.what, 0), limit.limit * per_item)
        bounds = Bounds(shape, BASE + sum(item_elements.values()), OTHER_ITEMS)
        out[method] = CallBounds(method, bounds, limits, error(method))
    return out


def _field(cls: Any, name: str) -> tuple[int, tuple[Any, ...]]:
    for field_id, spec in cls.thrift_spec.items():
        if spec[1] == name:
            return field_id, spec
    raise LookupError(f"{cls.__name__} has no field {name!r}")


def _add(shape: Shape, cls: Any, path: tuple[str, ...], limit: Limit) -> bool:
    """Adds the list at ``path`` of struct ``cls`` to ``shape``; whether
    its items are structs."""
    node = shape
    for name in path[:-1]:
        field_id, spec = _field(cls, name)
        if spec[0] != T_STRUCT:
            raise TypeError(f"{cls.__name__}.{name} is not a struct")
        inner = node.setdefault(field_id, (T_STRUCT, {}))[1]
        if not isinstance(inner, dict):
            raise TypeError(f"{cls.__name__}.{name} is both a list and a struct")
        node, cls = inner, spec[2]
    field_id, spec = _field(cls, path[-1])
    if spec[0] not in (T_LIST, T_SET):
        raise TypeError(f"{cls.__name__}.{path[-1]} is not a list")
    element = spec[2]
    etype = element if isinstance(element, int) else element[0]
    etype = T_STRING if etype == _BINARY else etype
    node[field_id] = (spec[0], Items(limit.what, limit.limit, etype))
    return bool(etype == T_STRUCT)
