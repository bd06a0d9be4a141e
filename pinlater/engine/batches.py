"""Batches: jobs enqueued under a batch, and a callback job that runs once
every one of them has ended (SUCCEEDED or FAILED).

Exactly once by construction: the callback is stored when the batch is
made, PENDING and due never (``MAX_TIMESTAMP_MS``), and the batch's end
*releases* it (``ShardBackend.release``: due now), which is idempotent, so
it can be said any number of times by any number of processes, and the
callback still runs once. Which jobs a batch holds and how each ended live
in the control store (``pinlater.stores.control.Batches``), whose steps
count a job's end once however often it is told, and make the batch
COMPLETE in the same atomic step as its last job's end (or its seal).

Ends are told in two ways:

* by the process that applies an ACK (``ended_by_acks``), for a queue
  whose jobs are in batches (``QueueConfig.batches``, set when its first
  job joins one), a moment later and many at a time (``EndsTeller``); a
  failure ACK's job is looked up, since it may have gone back to PENDING
  for a retry;
* by the monitor (``settle_batches``), for every live batch that has not
  changed for a while: its jobs whose end is not known are looked up on
  their shards, and a batch that is COMPLETE gets its callback released.
  That covers what the first way misses: claims that expired, cancels and
  deletes, a process that died between an ACK and telling the batch,
  another process's config cache that did not know the queue has batches.

A batch grows while it runs: a job of the batch may add jobs to it (the
next page) before its own ACK, since the batch cannot be complete while
that job has not ended. Its maker adds jobs before it seals it.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pinlater.descriptor import JobDescriptor
from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.limits import MAX_TIMESTAMP_MS
from pinlater.models import BatchStatus, Job
from pinlater.states import JobState
from pinlater.stores.control import (
    CANCELLED,
    COMPLETE,
    ENDED_FAILED,
    ENDED_OK,
    LIVE_BATCH_STATES,
    OPEN,
    RELEASED,
    SEALED,
    BatchRecord,
)
from pinlater.validation import check_batch_id

if TYPE_CHECKING:
    from pinlater.engine.shards import ShardSet
    from pinlater.stores.control import ControlStore


class Core(Protocol):
    """What of ``pinlater.engine.core.Core`` batches use (the core holds
    this module's ``EndsTeller``, so this module does not import it)."""

    @property
    def control(self) -> ControlStore: ...

    @property
    def shards(self) -> ShardSet: ...

    @property
    def batch_ends(self) -> EndsTeller: ...

log = logging.getLogger(__name__)

MAX_DESCRIPTION = 200
# The monitor looks up at most this many of a batch's jobs a pass.
SETTLE_LOOKUPS = 1000


def check_callback(job: Job) -> None:
    """A callback is released by making it due: it cannot have a time or
    a fairness key of its own, nor a unique key (it is stored once anyway)."""
    if job.run_after_ms is not None:
        raise InvalidRequest("a batch's callback runs when the batch ends: give it no run_after")
    if job.key:
        raise InvalidRequest("a batch's callback cannot have a fairness key")
    if job.unique:
        raise InvalidRequest("a batch's callback cannot have a unique key (it is stored once already)")


def status_of(record: BatchRecord) -> BatchStatus:
    doc = record.doc
    return BatchStatus(record.batch, record.state, record.total, record.succeeded, record.failed,
                       str(doc.get("callback", "")), str(doc.get("description", "")), record.created_ms,
                       record.updated_ms)


def get_record(core: Core, batch: str) -> BatchRecord:
    record = core.control.batch_get(check_batch_id(batch))
    if record is None:
        raise InvalidRequest(f"no batch {batch} (never made, or dropped after its retention)")
    return record


def joinable(record: BatchRecord) -> None:
    if record.state not in (OPEN, SEALED):
        raise InvalidRequest(f"batch {record.batch} is {record.state}: no job can join it any more")


def release(core: Core, batch: str) -> bool:
    """A COMPLETE batch's callback made due, then the batch RELEASED. False
    (the monitor tries again) if its shard could not be reached."""
    record = core.control.batch_get(batch)
    if record is None or record.state != COMPLETE:
        return record is not None and record.state == RELEASED
    callback = str(record.doc.get("callback", ""))
    if callback:
        d = JobDescriptor.parse(callback)
        try:
            states = core.shards.call(core.shards.get(d.shard), "release", d.queue,
                                      lambda b: b.release(d.queue, d.priority, [d.local_id]))
        except PinLaterError as exc:
            log.warning("batch %s ended, but its callback %s could not be released yet: %s", batch, callback, exc)
            return False
        if states[0] is None:
            log.warning("batch %s ended, but its callback %s is gone (deleted by an operator?)", batch, callback)
    core.control.batch_state(batch, (COMPLETE,), RELEASED)
    return True


def tell_ends(core: Core, ended: Mapping[str, str]) -> list[str]:
    """Jobs' ends told to their batches; the batches this completed, their
    callbacks released."""
    if not ended:
        return []
    done = core.control.batch_end(ended)
    for batch in done:
        release(core, batch)
    return done


def ended_by_acks(core: Core, queue: str, succeeded: Iterable[str], failed: Iterable[str]) -> None:
    """After ACKs of a queue whose jobs are in batches: the applied success
    ACKs' jobs SUCCEEDED; the applied failure ACKs' are to be looked up (a
    retry left sends one back to PENDING). Told by the process's ``EndsTeller``."""
    core.batch_ends.add(dict.fromkeys(succeeded, ENDED_OK), unsure=failed)


class EndsTeller:
    """Jobs' ends told to their batches a moment later, from a thread of
    its own, many at a time: an ACK call does not wait on the control store
    for them. ``flush`` tells what is waiting now (a read of a batch by this
    process does it first, so the process sees its own ACKs). What a
    process that dies had not told yet, the monitor finds: it looks up the
    jobs of every batch that has not changed for a while."""

    def __init__(self, interval_s: float = 0.02, most: int = 20_000) -> None:
        self._interval = interval_s
        self._most = most
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._ended: dict[str, str] = {}
        self._unsure: set[str] = set()
        self._core: Core | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def bind(self, core: Core) -> None:
        self._core = core

    def add(self, ended: Mapping[str, str], unsure: Iterable[str] = ()) -> None:
        """``ended``: known ends; ``unsure``: jobs to look up first."""
        with self._lock:
            self._ended.update(ended)
            self._unsure.update(d for d in unsure if d not in self._ended)
            waiting = len(self._ended) + len(self._unsure)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="pinlater-batch-ends", daemon=True)
                self._thread.start()
        if waiting >= self._most:
            self.flush()  # a backlog is told by the caller, which waits on it, rather than kept growing

    def flush(self) -> None:
        with self._flushing:
            with self._lock:
                ended, unsure = self._ended, self._unsure
                self._ended, self._unsure = {}, set()
            if (not ended and not unsure) or self._core is None:
                return
            try:
                if unsure:
                    ended.update({d: o for d, o in ends_of(self._core, sorted(unsure)).items() if o})
                tell_ends(self._core, ended)
            except PinLaterError as exc:
                log.warning("%d job ends not told to their batches (the monitor will): %s", len(ended), exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()


def ends_of(core: Core, descriptors: Sequence[str]) -> dict[str, str]:
    """Each job's end as a batch counts it: ENDED_OK, ENDED_FAILED (a job no
    longer stored counts as failed), or "" (not ended, or its shard could
    not be read)."""
    groups: dict[tuple[str, str, int], list[JobDescriptor]] = defaultdict(list)
    for text in descriptors:
        d = JobDescriptor.parse(text)
        groups[(d.shard, d.queue, d.priority)].append(d)
    out: dict[str, str] = {}
    for (shard, queue, priority), ds in groups.items():
        ids = [d.local_id for d in ds]
        try:
            records = core.shards.call(core.shards.get(shard), "lookup", queue,
                                       lambda b: b.lookup(queue, priority, ids, False, None))  # noqa: B023
        except PinLaterError as exc:
            log.info("batches: jobs of %s on shard %s not looked up this time: %s", queue, shard, exc)
            out.update(dict.fromkeys(map(str, ds), ""))
            continue
        for d, record in zip(ds, records, strict=True):
            if record is None:
                out[str(d)] = ENDED_FAILED
            elif record.state is JobState.SUCCEEDED:
                out[str(d)] = ENDED_OK
            elif record.state is JobState.FAILED:
                out[str(d)] = ENDED_FAILED
            else:
                out[str(d)] = ""
    return out


@dataclass
class SettleWalk:
    """Where the monitor's walk over live batches is (kept by its caller
    from pass to pass): past which (updated_ms, batch) the next page starts
    (None: from the oldest), and where it goes on in each batch's jobs."""

    after: tuple[int, str] | None = None
    in_batch: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)


def settle_batches(core: Core, idle_ms: int, walk: SettleWalk, limit: int = 100) -> int:
    """The monitor's pass: the next ``limit`` live batches unchanged for
    ``idle_ms`` (in the order they last changed, from where the last pass
    stopped, around again after the newest) have up to SETTLE_LOOKUPS of
    their unknown ends looked up (going on in each from where the last
    look stopped), and complete ones their callbacks released. A page that
    began at the oldest every time would look at the same batches for as
    long as their jobs run, and never reach one behind them whose end
    only the monitor can find. How many batches it completed or released."""
    core.batch_ends.flush()
    changed = 0
    live = core.control.batch_list(LIVE_BATCH_STATES, limit, idle_ms, after=walk.after)
    for record in live:
        walk.seen.add(record.batch)
        try:
            if record.state == COMPLETE:
                changed += release(core, record.batch)
                continue
            unended, walk.in_batch[record.batch] = core.control.batch_unended(
                record.batch, SETTLE_LOOKUPS, walk.in_batch.get(record.batch, ""))
            ends = {d: outcome for d, outcome in ends_of(core, unended).items() if outcome}
            changed += len(tell_ends(core, ends))
        except PinLaterError as exc:
            log.warning("batch %s not settled this pass: %s", record.batch, exc)
    if len(live) < limit:  # around again; a batch not met on this round has gone
        walk.after = None
        walk.in_batch = {b: c for b, c in walk.in_batch.items() if b in walk.seen}
        walk.seen = set()
    else:
        walk.after = (live[-1].updated_ms, live[-1].batch)
    return changed


def drop_old_batches(core: Core, older_than_ms: int, limit: int = 100) -> int:
    """Forget released and cancelled batches unchanged for ``older_than_ms``."""
    old = core.control.batch_list((RELEASED, CANCELLED), limit, older_than_ms)
    for record in old:
        core.control.batch_drop(record.batch)
    return len(old)


def never_due(job: Job) -> Job:
    """The callback as stored when its batch is made: due never."""
    return Job(job.body, job.priority, MAX_TIMESTAMP_MS, job.attempts_allowed, job.custom_status, job.trace)


def batch_doc(callback: str, description: str) -> dict[str, Any]:
    return {"callback": callback, "description": description}

