"""Concurrency caps: at most ``QueueConfig.max_running`` jobs of a queue
RUNNING at once, over every shard, worker and server process.

The slots are counted in the control store per *owner*: a process's
hold on one queue (``Slots`` is a core's, one pool per capped queue, each
under a random name, drawn again if the store knows it on a first step).
``ControlStore.slots_sync`` frees, gives back and takes slots in one
atomic step against the cap. Every job
a capped dequeue claims is claimed under a token that starts with its
owner's name (``CLAIM_OWNER_LEN`` characters), so the shards can always
say how many jobs each owner has running (``ShardBackend.running_owners``).

An owner keeps the slots its own jobs free (an ACK, a checkpoint back to
PENDING) and claims with them again without asking the store, which is what
makes a capped dequeue+ACK cost what an uncapped one does. What a process
holds in the store is always at least its spare slots plus the jobs it has
running or is claiming, so the jobs RUNNING never outnumber the slots held:

* a dequeue takes the slots it lacks first (one store step, counted
  against the cap), marks them in use, claims at most that many, and keeps
  what it did not use;
* an ACK or move to PENDING ends the claim on the shard first; the slot
  then becomes its owner's spare, or, for another owner's job, is freed in
  that owner's count by this process's next store step (within
  ``FLUSH_S``);
* spare slots not used for ``IDLE_S`` go back to the store, and an owner
  holding any syncs at least every ``REFRESH_S``;
* what ends a claim without a call here (a claim that expires, an
  operator's delete, a job ACKed by another owner) the owner finds by
  looking up its running jobs at least every ``CHECK_S`` while it holds
  any; a slot it finds freed by another owner it does not free again,
  since the store's count of it, not its own, bounds what it may use. As
  that owner's free reaches the store up to ``FLUSH_S`` after the ACK, a
  job found ended keeps its slot out of the spare ones for ``GONE_S``
  (``gone``): counted spare from a store count that the free had not
  lowered yet, it would be given back, and then freed again;
* an owner that has not synced for ``OWNER_STALE_MS`` is gone (killed, or
  cut off): the monitor's pass settles its count to the jobs it still has
  running on the shards (``reconcile``), and the same for jobs claimed by
  owners the store does not know (a cap set on a busy queue). An owner
  does not use its spare slots without a sync once ``CREDIT_TRUST_S`` has
  passed since its last, well before it could be taken for gone. Once
  settled, or once it left, an owner's count is the monitor's alone: a
  free of its slot by another owner is not applied, since the monitor's
  count may already leave that job out, and its next pass frees it.

A dequeue call whose shard stopped answering after it was sent
(``ShardOutcomeUnknown``) may have claimed jobs nobody was handed: the
slots it did not use stay held, in doubt, until those jobs' claims have
expired and a monitor pass had time to end them (``doubt_until``); then
they are spare.

A shard that cannot be reached keeps its jobs' slots: they may still be
running, so the cap keeps counting them until the shard answers again (the
monitor settles no owner while a shard is missing). A capped dequeue needs
the control store when its owner lacks slots: while the store cannot be
reached it hands out at most the spare slots it has (``SlotsUnavailable``
once it has none): a cap exists to protect the callee, so it fails closed,
where the rate limiter falls back to a local bucket.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pinlater.descriptor import JobDescriptor
from pinlater.errors import PinLaterError, ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.states import JobState
from pinlater.stores.base import CLAIM_OWNER_LEN, CLAIM_TOKEN_LEN, ShardOutcomeUnknown

if TYPE_CHECKING:
    from pinlater.engine.shards import ShardSet
    from pinlater.models import DequeuedJob
    from pinlater.stores.control import ControlStore

log = logging.getLogger(__name__)

OWNER_STALE_MS = 20_000
CREDIT_TRUST_S = 3.0
REFRESH_S = 1.0
CHECK_S = 1.0
IDLE_S = 0.2
FLUSH_S = 0.05
# How long a close waits for a background step under way: its store calls
# must not meet a control store the caller closes next, yet a step stuck on
# a silent store must not hold the close for good.
CLOSE_WAIT_S = 5.0
# A dequeue that finds the cap full asks the store again only this much
# after the last step that found it full: each of a process's idle pollers
# would otherwise make one store step per poll.
FULL_S = 0.01
# Slots in doubt are held this long past the claim timeout: a monitor pass
# (every 5 s by default) ends the expired claims, twice over.
DOUBT_EXTRA_S = 10.0
# A job of this owner's found ended by a lookup keeps its slot out of the
# spare ones this long: past any other owner's free of it (FLUSH_S, and a
# step or two of its background thread), which the store's count then shows.
GONE_S = 1.0

# A job whose claim ended: its descriptor and its claim's token (None if
# the caller named no claim and the job was not this process's).
Ended = tuple[str, str | None]


def doubt_until(config: QueueConfig) -> float:
    """Until when (monotonic) slots a lost reply may be using stay held."""
    return time.monotonic() + config.claim_timeout_ms / 1000 + DOUBT_EXTRA_S


def counts_claims(config: QueueConfig) -> bool:
    """Whether the queue's slots count its jobs' claims: it has a cap, or
    a per-key cap (``pinlater.engine.key_slots``)."""
    return config.max_running is not None or config.key_max_running is not None


class SlotsUnavailable(ShardConnectionFailed):
    """The control store could not be reached for a capped queue's slots."""


@dataclass
class _Pool:
    """One capped queue's slots as this process holds them, under its own
    owner's name (random: a name already known to the store on a first
    step is drawn again)."""

    cap: int
    owner: str = field(default_factory=lambda: secrets.token_hex(CLAIM_OWNER_LEN // 2))
    registered_at: float = -1e9  # the last store step (monotonic)
    credit: int = 0  # spare slots, held in the store
    held: int = 0  # what the store said this owner holds, at the last step
    in_use: int = 0  # slots of claims under way
    running: dict[str, str] = field(default_factory=dict)  # descriptor -> claim token
    frees: dict[str, int] = field(default_factory=dict)  # other owner -> slots to free
    synced_at: float = -1e9
    used_at: float = 0.0
    checked_at: float = 0.0
    full_at: float = -1e9  # the last step that granted less than it asked
    doubt: list[tuple[float, int]] = field(default_factory=list)  # (until, slots) of lost replies
    gone: list[float] = field(default_factory=list)  # until when, per job found ended by a lookup
    lock: threading.Lock = field(default_factory=threading.Lock)  # the fields above
    stepping: threading.Lock = field(default_factory=threading.Lock)  # one store step at a time


class Slots:
    """The slot steps of one process (one owner) over a control store and
    the shards (see the module doc)."""

    def __init__(self, control: ControlStore, shards: ShardSet) -> None:
        self._control = control
        self._shards = shards
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _token(pool: _Pool) -> str:
        # The rest is random, not a count: a claim's token is what proves it,
        # and one caller's claims must not tell it the next one's.
        return pool.owner + secrets.token_hex((CLAIM_TOKEN_LEN - CLAIM_OWNER_LEN) // 2)

    def _pool(self, config: QueueConfig) -> _Pool | None:
        """The queue's pool, made if it has a cap (None if it has neither)."""
        with self._lock:
            pool = self._pools.get(config.name)
            if pool is None and config.max_running is not None:
                pool = self._pools[config.name] = _Pool(config.max_running)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._tend, name="pinlater-slots", daemon=True)
                    self._thread.start()
            if pool is not None and config.max_running is not None:
                pool.cap = config.max_running
            return pool

    # -- a dequeue ----------------------------------------------------------------------------
    def claim(
        self, config: QueueConfig, wanted: int,
        collect: Callable[[int, str], tuple[list[DequeuedJob], PinLaterError | None]],
        ended: Sequence[Ended] = (), doubt: Sequence[str] = (),
    ) -> tuple[list[DequeuedJob], PinLaterError | None]:
        """``collect(n, token)`` under at most ``n`` of the cap's slots,
        claiming under ``token``: an empty answer, as an empty queue gives,
        when none is free. ``ended``: the jobs whose claims the same call
        ended (its riding ACKs), whose slots are used again first.
        ``doubt``: filled by ``collect`` with the shards whose outcome it
        does not know; then the slots it did not use stay in doubt."""
        pool = self._pool(config)
        assert pool is not None, "claim() is for capped queues"
        with pool.lock:
            self._end(pool, ended)
        n = self._take(config, pool, wanted)
        if n <= 0 and self._check_soon(config, pool):
            n = self._take(config, pool, wanted)  # a job of this process's had ended unseen
        if n <= 0:
            return [], None
        jobs: list[DequeuedJob] = []
        try:
            jobs, error = collect(n, self._token(pool))
        finally:
            with pool.lock:
                pool.in_use -= n
                if doubt and n > len(jobs):
                    pool.doubt.append((doubt_until(config), n - len(jobs)))
                else:
                    pool.credit += n - len(jobs)
                for j in jobs:
                    pool.running[j.descriptor] = j.claim[:CLAIM_TOKEN_LEN]
                pool.used_at = time.monotonic()
        return jobs, error

    def _take(self, config: QueueConfig, pool: _Pool, wanted: int) -> int:
        """Mark up to ``wanted`` slots in use: spare ones, and as many more
        as the store grants (one step), or only spare ones while it cannot
        be reached, for ``CREDIT_TRUST_S`` after the last step."""
        if not self._spare_enough(pool, wanted) and time.monotonic() - pool.full_at >= FULL_S:
            try:
                self._sync(config.name, pool, want=wanted, need=wanted)
            except ShardConnectionFailed as exc:
                with pool.lock:
                    usable = pool.credit and time.monotonic() - pool.synced_at < CREDIT_TRUST_S
                if not usable:
                    raise SlotsUnavailable(
                        f"queue {config.name!r} has a concurrency cap, whose slots are in the control store, "
                        f"which cannot be reached: {exc}"
                    ) from None
        with pool.lock:
            n = min(wanted, pool.credit)
            pool.credit -= n
            pool.in_use += n
            return n

    @staticmethod
    def _spare_enough(pool: _Pool, wanted: int) -> bool:
        """Whether a dequeue may go on without a store step: enough spare
        slots, trusted, and no other owner's slots to free."""
        with pool.lock:
            return (pool.credit >= wanted and not pool.frees
                    and time.monotonic() - pool.synced_at < CREDIT_TRUST_S)

    def free(self, config: QueueConfig, ended: Sequence[Ended]) -> None:
        """After ACKs or moves to PENDING were applied: each job's slot
        becomes this process's spare, or another owner's to free (in this
        process's next store step)."""
        pool = self._pool(config) if ended else None
        if pool is not None:
            with pool.lock:
                self._end(pool, ended)

    def _end(self, pool: _Pool, ended: Sequence[Ended]) -> None:
        for descriptor, token in ended:
            mine = pool.running.get(descriptor)
            if mine is not None and (token is None or token == mine):
                del pool.running[descriptor]
                pool.credit += 1
            elif token is not None and not token.startswith(pool.owner):
                # Another owner's claim (of a job this process may have held
                # before its claim expired: its own check settles that one).
                owner = token[:CLAIM_OWNER_LEN]
                pool.frees[owner] = pool.frees.get(owner, 0) + 1
            # else: a job of this process's that its own check found ended already

    def tokens_of(self, config: QueueConfig, descriptors: Sequence[str]) -> dict[str, str]:
        """The claim tokens of RUNNING jobs named without their claims (a
        stock client's ACKs): this process's own from memory, the rest
        looked up on their shards before the ACKs clear them."""
        if not descriptors:
            return {}
        pool = self._pools.get(config.name)
        known: dict[str, str] = {}
        if pool is not None:
            with pool.lock:
                known = dict(pool.running)
        found = {d: known[d] for d in descriptors if d in known}
        for d, r in self.claims_of(config.name, [d for d in descriptors if d not in found]).items():
            if r is not None:
                found[d] = r[:CLAIM_TOKEN_LEN]
        return found

    def claims_of(self, queue: str, descriptors: Sequence[str]) -> dict[str, str | None]:
        """The claim of each job that is RUNNING (None: not RUNNING), one
        lookup per shard and priority; the jobs of a shard that fails are
        left out, since they may be running still."""
        groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for d in descriptors:
            parsed = JobDescriptor.parse(d)
            groups.setdefault((parsed.shard, parsed.priority), []).append((parsed.local_id, d))
        out: dict[str, str | None] = {}
        for (shard_id, p), items in groups.items():
            ids = [i for i, _ in items]
            try:
                records = self._shards.call(self._shards.get(shard_id), "lookup", queue,
                                            lambda b, p=p, ids=ids: b.lookup(queue, p, ids, False, None))  # type: ignore[misc]
            except PinLaterError:
                continue
            for (_, d), r in zip(items, records, strict=True):
                out[d] = r.claim if r is not None and r.state is JobState.RUNNING and r.claim else None
        return out

    # -- store steps --------------------------------------------------------------------------
    def _sync(
        self, queue: str, pool: _Pool, want: int = 0, give_back: int = 0, leaving: bool = False,
        need: int | None = None,
    ) -> None:
        """One store step: free other owners' slots, give back spare ones,
        take up to ``want`` more. One at a time per queue (``stepping``);
        the pool's lock is held only around it, so the process's dequeues
        that have spare slots never wait on the store. ``need``: none if,
        once this step's turn comes, that many are spare (another thread's
        step got them)."""
        with pool.stepping:
            if need is not None and self._spare_enough(pool, need):
                return
            with pool.lock:
                frees, pool.frees = pool.frees, {}
                given = min(give_back, pool.credit)
                pool.credit -= given  # out of reach of dequeues before the store sees it go
            try:
                synced = self._step(queue, pool, max(0, want), given, frees, leaving)
            except BaseException as exc:
                # A step that may have been applied stands: freed again, a
                # slot could be freed twice. What this owner holds the next
                # step says (spare slots not given back come back as credit).
                if not isinstance(exc, ShardOutcomeUnknown):
                    with pool.lock:
                        for owner, n in frees.items():
                            pool.frees[owner] = pool.frees.get(owner, 0) + n
                        pool.credit += given
                raise
            granted, held = synced
            with pool.lock:
                # The store's count of this owner is the truth: lowered by
                # other owners' frees of its jobs, raised by none of its own.
                pool.credit = max(0, held - len(pool.running) - pool.in_use - sum(n for _, n in pool.doubt)
                                  - len(pool.gone))
                pool.held = held
                pool.synced_at = pool.registered_at = time.monotonic()
                if granted < want:
                    pool.full_at = pool.synced_at

    def _step(
        self, queue: str, pool: _Pool, want: int, given: int, frees: dict[str, int], leaving: bool
    ) -> tuple[int, int]:
        """``slots_sync`` under the pool's owner. A pool that holds nothing
        and has not stepped lately (so the store may have forgotten it)
        steps as a first one, and draws another name if its own is known."""
        with pool.lock:
            idle = not (pool.held or pool.credit or pool.running or pool.in_use)
        first = idle and not leaving and time.monotonic() - pool.registered_at > OWNER_STALE_MS / 2000
        for _ in range(3):
            synced = self._control.slots_sync(queue, pool.cap, pool.owner, want, given, frees, leaving, first)
            if synced is not None:
                return synced
            pool.owner = secrets.token_hex(CLAIM_OWNER_LEN // 2)
        raise PinLaterError(f"slots of {queue}: three owner names in a row were taken")

    def _check_soon(self, config: QueueConfig, pool: _Pool) -> bool:
        """A dequeue found no slot: look up this process's running jobs now
        if not lately (a claim may have expired under one of them). True if
        one had ended."""
        if pool.running and time.monotonic() - pool.checked_at >= CHECK_S:
            return self._check(config.name, pool) > 0
        return False

    def _check(self, queue: str, pool: _Pool) -> int:
        """Forget jobs of this process that are no longer RUNNING under its
        claim (their slots are spare from the next sync on)."""
        pool.checked_at = time.monotonic()
        with pool.lock:
            mine = dict(pool.running)
        gone = [d for d, claim in self.claims_of(queue, list(mine)).items()
                if claim is None or not claim.startswith(mine[d])]
        with pool.lock:
            until = time.monotonic() + GONE_S
            for d in gone:
                if pool.running.get(d) == mine[d]:
                    # Its slot is spare once GONE_S has passed, from the
                    # next sync on, which counts it unless another owner
                    # freed it meanwhile.
                    del pool.running[d]
                    pool.gone.append(until)
            if gone:
                pool.synced_at = -1e9  # the next dequeue syncs first
        return len(gone)

    def _tend(self) -> None:
        """The background steps: free other owners' slots, give back spare
        slots not used lately, keep this owner's stamp fresh, and look up
        its running jobs."""
        while not self._stop.wait(FLUSH_S):
            with self._lock:
                pools = list(self._pools.items())
            for queue, pool in pools:
                try:
                    self._tend_pool(queue, pool)
                except PinLaterError as exc:
                    log.warning("slots of %s: %s", queue, exc)
                except Exception:
                    log.exception("slots of %s", queue)

    def _tend_pool(self, queue: str, pool: _Pool) -> None:
        now = time.monotonic()
        if pool.running and now - pool.checked_at >= CHECK_S:
            self._check(queue, pool)
        with pool.lock:
            if any(until <= now for until, _ in pool.doubt):
                pool.credit += sum(n for until, n in pool.doubt if until <= now)
                pool.doubt = [(until, n) for until, n in pool.doubt if until > now]
                pool.used_at = now  # spare from now on
            if pool.gone and pool.gone[0] <= now:
                pool.gone = [until for until in pool.gone if until > now]
                pool.synced_at = -1e9  # the store's count says from the next sync what is spare
            idle = pool.credit > 0 and pool.in_use == 0 and now - pool.used_at >= IDLE_S
            holding = pool.held or pool.credit or pool.running or pool.in_use or pool.doubt or pool.gone
            due = pool.frees or idle or (holding and now - pool.synced_at >= REFRESH_S)
        if due:
            self._sync(queue, pool, give_back=pool.credit if idle else 0)

    def close(self) -> None:
        """Give back the spare slots and leave: the monitor settles the
        slots of jobs still running at its next pass."""
        self._stop.set()
        with self._lock:
            thread = self._thread
            pools = list(self._pools.items())
        if thread is not None:
            thread.join(CLOSE_WAIT_S)
        for queue, pool in pools:
            try:
                self._sync(queue, pool, give_back=pool.credit, leaving=True)
            except PinLaterError as exc:
                log.warning("slots of %s not given back (the monitor settles them): %s", queue, exc)

    # -- after a change of cap, and the monitor's step ---------------------------------------------
    def set_cap(self, config: QueueConfig) -> None:
        """After a queue's cap changed: with a cap, the jobs already running
        are counted at once. Without, the slots stay, so that a cap set
        again finds every owner's count as it was."""
        if config.max_running is not None:
            self.reconcile(config)

    def reconcile(self, config: QueueConfig) -> Reconciled:
        """Settle the slots of owners gone (not synced for
        ``OWNER_STALE_MS``) or unknown to the store to the jobs they have
        running, if every shard answers."""
        queue = config.name
        now, owners = self._control.slots_owners(queue)
        out = Reconciled(held=sum(h for h, _ in owners.values()))
        counts: dict[str, int] = {}
        for (owner, _), n in count_running(self._shards, config, out.shards_skipped, "slots").items():
            counts[owner] = counts.get(owner, 0) + n
        if out.shards_skipped:
            return out  # a missing shard's jobs may be running: settle nobody
        stale_before = now - OWNER_STALE_MS
        settle = {o: counts.get(o, 0) for o, (_, at) in owners.items() if at < stale_before}
        settle.update({o: n for o, n in counts.items() if o not in owners})
        freed = self._control.slots_settle(queue, settle, stale_before)
        out.freed, out.added = max(0, freed), max(0, -freed)
        out.held -= freed
        return out


def count_running(
    shards: ShardSet, config: QueueConfig, skipped: list[str], what: str,
) -> dict[tuple[str, str], int]:
    """The queue's RUNNING jobs per claim owner and key over every shard
    (``ShardBackend.running_owners``); a shard out of rotation or failing
    is added to ``skipped``, and its jobs are not counted."""
    queue = config.name
    counts: dict[tuple[str, str], int] = {}
    for backend in shards.all():
        if not shards.is_healthy(backend.shard_id):
            skipped.append(backend.shard_id)
            continue
        for p in range(1, config.priorities + 1):
            try:
                found = shards.call(backend, "running_owners", queue,
                                    lambda b, p=p: b.running_owners(queue, p))  # type: ignore[misc]
            except PinLaterError as exc:
                skipped.append(backend.shard_id)
                log.info("%s of %s: shard %s not counted: %s", what, queue, backend.shard_id, exc)
                break
            for at, n in found.items():
                counts[at] = counts.get(at, 0) + n
    return counts


@dataclass(slots=True)
class Reconciled:
    freed: int = 0
    added: int = 0
    held: int = 0
    shards_skipped: list[str] = field(default_factory=list)
