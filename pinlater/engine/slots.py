"""Concurrency caps: at most ``QueueConfig.max_running`` jobs of a queue
RUNNING at once, over every shard, worker and server process.

A slot is a member of the queue's slot set in the control store, stamped
with the store's clock when taken (``ControlStore.slots_*``): a lease named
after a running job (``SHARD:pPRIORITY:ID``), or one of a dequeue's
reservations (``TOKEN:i``). The steps are ordered so that the jobs RUNNING
are always a subset of the slots held, whatever runs at the same time:

* a dequeue takes n reservations first (count and take are one step in the
  store, against the cap), claims at most n jobs on the shards, then swaps
  its reservations for the claimed jobs' leases in one step (unused
  reservations are freed by the same swap);
* an ACK, or a checkpoint that moves its job back to PENDING, ends the
  claim on the shard first and frees the job's lease after;
* whatever ends a claim without a client's call (claim expiry, an
  operator's delete), and a free lost because a process died between its
  two steps, is settled by the monitor's pass (``reconcile``): a lease whose
  job is no longer RUNNING is freed, a RUNNING job without a lease gets one
  (a cap set on a busy queue, a control store that lost its last writes),
  and a reservation never swapped is freed after ``RESERVATION_MAX_MS``.

A shard that cannot be reached keeps its jobs' leases: they may still be
running, so the cap keeps counting them until the shard answers again and
the monitor's pass settles them. A cap's dequeue needs the control store:
while it cannot be reached, a capped queue hands out nothing (an uncapped
queue is not affected), where the rate limiter falls back to a local
bucket; a cap exists to protect the callee, so it fails closed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pinlater.descriptor import JobDescriptor
from pinlater.errors import PinLaterError, ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState
from pinlater.stores.base import ScanQuery

if TYPE_CHECKING:
    from pinlater.engine.shards import ShardSet
    from pinlater.models import DequeuedJob
    from pinlater.stores.control import ControlStore

log = logging.getLogger(__name__)

# A reservation older than this was left by a dequeue that died between
# its steps (a dequeue call is bounded by the stores' socket timeouts, far
# below this): the monitor frees it.
RESERVATION_MAX_MS = 60_000
RESERVED = "~"
_SCAN_PAGE = 1000

def member(descriptor: str, queue: str) -> str:
    """A job's lease name: its descriptor's text without the queue
    (``QUEUE:sSHARD:pP:ID`` -> ``SHARD:pP:ID``), canonical as
    ``JobDescriptor`` writes it."""
    return descriptor[len(queue) + 2:]


def shard_of(lease: str) -> str:
    return lease.split(":", 1)[0]


class SlotsUnavailable(ShardConnectionFailed):
    """The control store could not be reached for a capped queue's slots."""


class Slots:
    """The slot steps over a control store and the shards (see the module doc)."""

    def __init__(self, control: ControlStore, shards: ShardSet) -> None:
        self._control = control
        self._shards = shards

    def claim(
        self, config: QueueConfig, wanted: int,
        collect: Callable[[int], tuple[list[DequeuedJob], PinLaterError | None]],
        ended: list[str] | None = None,
    ) -> tuple[list[DequeuedJob], PinLaterError | None]:
        """``collect(n)`` under at most ``n`` of the cap's free slots: an
        empty answer, as an empty queue gives, when none is free. The
        slots of ``ended`` (descriptors of jobs whose claims the same call
        ended: its riding ACKs) are freed in the same store call, and the
        list emptied once they are: freed twice, a slot taken again in
        between by the same job, claimed anew, would be lost."""
        cap = config.max_running
        assert cap is not None
        control = self._control
        token = RESERVED + os.urandom(8).hex()
        try:
            n = control.slots_take(config.name, cap, wanted, token, [member(d, config.name) for d in ended or ()])
        except ShardConnectionFailed as exc:
            raise SlotsUnavailable(
                f"queue {config.name!r} has a concurrency cap, whose slots are in the control store, "
                f"which cannot be reached: {exc}"
            ) from None
        if ended:
            ended.clear()
        if n <= 0:
            return [], None
        jobs: list[DequeuedJob] = []
        try:
            jobs, error = collect(n)
        finally:
            leases = [member(j.descriptor, config.name) for j in jobs]
            try:
                control.slots_bind(config.name, token, n, leases)
            except PinLaterError as exc:
                # The reservations stay held, so the jobs are counted: the
                # monitor swaps them for leases (``reconcile``).
                log.warning("slots of %s not bound (%d jobs; the monitor will): %s", config.name, len(jobs), exc)
        return jobs, error

    def free(self, config: QueueConfig, descriptors: Sequence[str]) -> None:
        """Free the leases of jobs whose claims have ended (ACKed, or moved
        back to PENDING by a checkpoint). A failure is logged, not raised:
        the claim has ended, and the monitor frees what is left."""
        if not descriptors:
            return
        try:
            self._control.slots_free(config.name, [member(d, config.name) for d in descriptors])
        except PinLaterError as exc:
            log.warning("%d slots of %s not freed (the monitor will): %s", len(descriptors), config.name, exc)

    def set_cap(self, config: QueueConfig) -> None:
        """After a queue's cap changed: without a cap, its slots are dropped;
        with one, the jobs already running are counted at once."""
        if config.max_running is None:
            self._control.slots_drop(config.name)
        else:
            self.reconcile(config)

    # -- the monitor's step ----------------------------------------------------------------
    def reconcile(self, config: QueueConfig) -> Reconciled:
        """Make the slots held match the jobs RUNNING on the shards that
        answer (see the module doc); the leases of a shard that does not
        answer are kept."""
        queue, control = config.name, self._control
        now, held = control.slots_read(queue)
        out = Reconciled()
        running: set[str] = set()
        answered: set[str] = set()
        for backend in self._shards.healthy():
            try:
                running |= self._running_on(backend.shard_id, config)
            except PinLaterError as exc:
                out.shards_skipped.append(backend.shard_id)
                log.info("slots of %s: shard %s skipped: %s", queue, backend.shard_id, exc)
                continue
            answered.add(backend.shard_id)
        leases = [m for m in held if not m.startswith(RESERVED)]
        # Not seen running: confirmed by a lookup, which a heartbeat moving
        # the job within the running set cannot miss as a paged scan can.
        unseen = [m for m in leases if m not in running and shard_of(m) in answered]
        ended = self._not_running(config, unseen)
        out.freed = control.slots_prune(queue, ended, now)
        missing = [m for m in running if m not in held]
        control.slots_add(queue, missing)
        out.added = len(missing)
        cutoff = now - RESERVATION_MAX_MS
        old = [m for m, at in held.items() if m.startswith(RESERVED) and at < cutoff]
        out.reservations_freed = control.slots_prune(queue, old, cutoff)
        out.held = len(held) - out.freed - out.reservations_freed + out.added
        return out

    def _running_on(self, shard_id: str, config: QueueConfig) -> set[str]:
        shards = self._shards
        backend = shards.get(shard_id)
        found: set[str] = set()
        for p in range(1, config.priorities + 1):
            query = ScanQuery(config.name, p, JobState.RUNNING, False, None, _SCAN_PAGE, False)
            while True:
                page = shards.call(backend, "scan", config.name, lambda b, q=query: b.scan(q))  # type: ignore[misc]
                found.update(f"{shard_id}:p{p}:{r.local_id}" for r in page)
                if len(page) < _SCAN_PAGE:
                    break
                query = ScanQuery(config.name, p, JobState.RUNNING, False,
                                  (page[-1].sort_time_ms, page[-1].local_id), _SCAN_PAGE, False)
        return found

    def _not_running(self, config: QueueConfig, leases: Iterable[str]) -> list[str]:
        shards = self._shards
        groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for m in leases:
            d = JobDescriptor.parse(f"{config.name}:s{m}")
            groups.setdefault((d.shard, d.priority), []).append((d.local_id, m))
        ended: list[str] = []
        for (shard_id, p), items in groups.items():
            ids = [i for i, _ in items]
            try:
                records = shards.call(shards.get(shard_id), "lookup", config.name,
                                      lambda b, p=p, ids=ids: b.lookup(config.name, p, ids, False, None))  # type: ignore[misc]
            except PinLaterError as exc:
                log.info("slots of %s: shard %s not looked up, its leases kept: %s", config.name, shard_id, exc)
                continue
            ended += [m for (_, m), r in zip(items, records, strict=True)
                      if r is None or r.state != JobState.RUNNING]
        return ended


@dataclass(slots=True)
class Reconciled:
    freed: int = 0
    added: int = 0
    reservations_freed: int = 0
    held: int = 0
    shards_skipped: list[str] = field(default_factory=list)
