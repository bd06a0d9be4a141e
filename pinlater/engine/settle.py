"""Settling ACKs and checkpoints: the one place that decides, for each
entry, whether it was applied, stale or unapplied.

* **acked**: the shard applied it;
* **stale**: the shard answered that it did not apply (the entry's claim,
  or its caller's source when it names none, no longer holds the job; or
  the queue was deleted and its jobs with it);
* **unapplied**: the shard failed or could not be reached, so it is not
  known to be applied; every transition is safe to repeat.

``settle`` takes one or more callers' entries already routed to their
shards and makes one store call per shard for all of them; each caller
gets what it would have got alone. ``JobService.ack`` and ``checkpoint``
settle one caller, the server's coalescer several.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pinlater.descriptor import JobDescriptor, shown
from pinlater.engine.batches import ended_by_acks
from pinlater.engine.core import Core
from pinlater.engine.slots import Ended, counts_claims
from pinlater.errors import AckNotApplied, InvalidRequest, PinLaterError, QueueDeleted
from pinlater.models import Ack, AckResult, Checkpoint
from pinlater.queue_config import QueueConfig
from pinlater.stores.base import CLAIM_TOKEN_LEN, AckItem, FailItem, ShardBackend
from pinlater.validation import check_batch, check_claims, check_delay, check_priority, check_source, check_status

E = TypeVar("E", Ack, Checkpoint)
Item = TypeVar("Item")
# Entries by shard: each shard with its (descriptor, entry) pairs.
Routed = list[tuple[ShardBackend, list[tuple[JobDescriptor, Any]]]]


@dataclass
class Share:
    """One caller's share of a settlement: its result and, per shard that
    failed, why."""

    result: AckResult = field(default_factory=AckResult)
    errors: list[str] = field(default_factory=list)

    def checked(self, what: str, advice: str = "") -> AckResult:
        """The result; AckNotApplied if a shard left some unapplied."""
        if self.errors:
            raise AckNotApplied(
                f"{len(self.result.unapplied)} {what} not applied{advice}: {'; '.join(self.errors)}", self.result
            )
        return self.result

    def result_of_acks(self) -> AckResult:
        return self.checked("ACKs", " (retry them, or they time out and re-run)")


def checked_descriptor(core: Core, queue: str, config: QueueConfig, text: str) -> JobDescriptor:
    """``text`` parsed; raises for a descriptor of another queue, an unknown
    shard or a priority the queue lacks."""
    d = JobDescriptor.parse(text)
    if d.queue != queue:
        raise InvalidRequest(f"descriptor {shown(text)} is not in queue {queue!r}")
    check_priority(config, d.priority)
    core.shards.get(d.shard)  # a shard of the set, or InvalidRequest
    return d


def route(core: Core, queue: str, config: QueueConfig, entries: Iterable[E]) -> Routed:
    """The entries parsed (``checked_descriptor``) and grouped by shard."""
    groups: dict[str, list[tuple[JobDescriptor, Any]]] = {}
    for entry in entries:
        d = checked_descriptor(core, queue, config, entry.descriptor)
        groups.setdefault(d.shard, []).append((d, entry))
    return [(core.shards.get(s), pairs) for s, pairs in groups.items()]


def settle(
    core: Core,
    op: str,
    queue: str,
    callers: Sequence[Routed],
    shares: Sequence[Share],
    make_item: Callable[[int, JobDescriptor, Any], Item],
    apply: Callable[[ShardBackend, list[Item]], list[bool]],
    *,
    ends_claim: Callable[[Any], bool] | None = None,
) -> list[Ended]:
    """Applies every caller's routed entries, one store call (``op``) per
    shard, and records each entry in its caller's share (see the module doc).
    Returns the entries applied that ``ends_claim`` (none without it), each
    as its descriptor and claim token (None if it named no claim): the
    slots a capped queue frees (``pinlater.engine.slots``)."""
    ended: list[Ended] = []
    parts: dict[str, tuple[ShardBackend, list[tuple[int, list[tuple[JobDescriptor, Any]]]]]] = {}
    for caller, routed in enumerate(callers):
        for backend, pairs in routed:
            parts.setdefault(backend.shard_id, (backend, []))[1].append((caller, pairs))
    for shard_id, (backend, owners) in parts.items():
        items = [make_item(caller, d, entry) for caller, pairs in owners for d, entry in pairs]
        try:
            applied = core.shards.call(backend, op, queue, lambda b: apply(b, items))  # noqa: B023 -- called at once
            if len(applied) != len(items):
                raise PinLaterError(f"shard {shard_id} answered {len(applied)} of {len(items)}")
        except QueueDeleted:
            applied = [False] * len(items)  # its jobs are gone with it: stale, as where its storage is empty
        except PinLaterError as exc:
            cause = f"shard {shard_id}: {exc}"
            for caller, pairs in owners:
                shares[caller].errors.append(f"shard {shard_id}: {len(pairs)} jobs ({exc})")
                for d, _ in pairs:
                    shares[caller].result.unapplied[str(d)] = cause
            continue
        start = 0
        for caller, pairs in owners:
            result = shares[caller].result
            for (d, entry), ok in zip(pairs, applied[start : start + len(pairs)], strict=True):
                text = str(d)
                (result.acked if ok else result.stale).append(text)
                if ok and ends_claim is not None and ends_claim(entry):
                    ended.append((text, entry.claim[:CLAIM_TOKEN_LEN] if entry.claim else None))
            start += len(pairs)
    return ended


# -- ACKs -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedAcks:
    """One caller's ACKs, checked and routed to their shards."""

    queue: str
    config: QueueConfig
    source: str
    succeeded: Routed
    failed: Routed

    @property
    def count(self) -> int:
        return sum(len(pairs) for _, pairs in (*self.succeeded, *self.failed))


def prepare_acks(
    core: Core, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack], source: str
) -> PreparedAcks:
    """Checks the ACKs and routes each to its shard, applying nothing;
    raises for bad input."""
    source = check_source(source)
    config = core.configs.get(queue)
    check_batch(len(succeeded) + len(failed), core.settings.max_jobs_per_call, "ACKs")
    for a in failed:
        check_delay(a.retry_delay_ms)
    for a in (*succeeded, *failed):
        check_status(a.append_custom_status)
    check_claims([a.claim for a in succeeded] + [a.claim for a in failed])
    # Parse and route everything before applying anything.
    return PreparedAcks(queue, config, source, route(core, queue, config, succeeded),
                        route(core, queue, config, failed))


def settle_acks(core: Core, batch: Sequence[PreparedAcks], held: list[Ended] | None = None) -> list[Share]:
    """One or more callers' prepared ACKs of one queue: one call per shard
    for the success ACKs of all of them, then one per shard for the
    failures, each item under its own claim, or else its caller's source.
    Every ACK applied ends its claim: a capped queue frees its slot after,
    or, with ``held``, adds its descriptor there for the caller to free
    (a dequeue the ACKs ride on frees them with its take)."""
    queue, config = batch[0].queue, batch[0].config
    shares = [Share() for _ in batch]
    if not counts_claims(config):
        _settle_acks(core, batch, queue, config, shares, None, [])
        if config.batches:
            _tell_batches(core, queue, batch, shares)
        return shares
    # A capped queue's slots: the tokens of jobs ACKed without their claims
    # are read first, since the ACKs clear them (per-key slots free only
    # their process's own jobs, which it knows).
    tokens = core.slots.tokens_of(config, [
        str(d) for p in batch for _, pairs in (*p.succeeded, *p.failed) for d, a in pairs if not a.claim
    ]) if config.max_running is not None else {}
    ended: list[Ended] = []
    try:
        _settle_acks(core, batch, queue, config, shares, lambda _: True, ended)
    finally:
        ended = [(d, token or tokens.get(d)) for d, token in ended]
        if held is None:
            free_ended(core, config, ended)
        else:
            held += ended
    if config.batches:
        _tell_batches(core, queue, batch, shares)
    return shares


def _tell_batches(core: Core, queue: str, batch: Sequence[PreparedAcks], shares: Sequence[Share]) -> None:
    """The applied ACKs' jobs' ends, told to their batches (``pinlater.engine.batches``).
    The shares list the applied ones; a job a failure ACK names is looked up
    (even if its success ACK in the same call was the one applied)."""
    acked = [t for share in shares for t in share.result.acked]
    failing = {str(d) for p in batch for _, pairs in p.failed for d, _ in pairs}
    if not failing:
        ended_by_acks(core, queue, acked, ())
        return
    ended_by_acks(core, queue, [t for t in acked if t not in failing], [t for t in acked if t in failing])


def free_ended(core: Core, config: QueueConfig, ended: Sequence[Ended]) -> None:
    """The slots of jobs whose claims ended (ACKed, moved back to PENDING):
    the queue's cap's and the per-key caps'."""
    core.slots.free(config, ended)
    core.key_slots.free(config, ended)


def _settle_acks(
    core: Core, batch: Sequence[PreparedAcks], queue: str, config: QueueConfig, shares: list[Share],
    ends: Callable[[Any], bool] | None, ended: list[Ended],
) -> None:
    if any(p.succeeded for p in batch):
        ended += settle(
            core, "ack_succeeded", queue, [p.succeeded for p in batch], shares,
            lambda caller, d, a: AckItem(d.priority, d.local_id, batch[caller].source, a.append_custom_status,
                                         a.claim or None),
            lambda b, items: b.ack_succeeded(queue, items),
            ends_claim=ends,
        )
    if not any(p.failed for p in batch):
        return
    # The policy's delay is picked inside the transition from the job's own
    # attempt count: one round trip, no read first.
    delays = config.retry.delay_table()
    ended += settle(
        core, "ack_failed", queue, [p.failed for p in batch], shares,
        lambda caller, d, a: FailItem(d.priority, d.local_id, batch[caller].source, a.append_custom_status,
                                      a.retry_delay_ms if a.retry_delay_ms > 0 else None, a.claim or None),
        lambda b, items: b.ack_failed(queue, items, delays),
        ends_claim=ends,
    )
