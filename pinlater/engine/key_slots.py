"""Per-key caps: at most ``QueueConfig.key_max_running`` jobs of each
fairness key RUNNING at once, over every shard, worker and server process.

The control store counts a queue's per-key slots per *owner* and key
(``ControlStore.key_slots_sync``), the owner being the first
``CLAIM_OWNER_LEN`` characters of the claim token the jobs were claimed
under: a capped queue's owner (``pinlater.engine.slots``), or else this
process's own for the queue. So the shards can always say how many jobs
each owner runs per key (``ShardBackend.running_owners``).

* A dequeue reads the keys its shards would serve first
  (``ShardBackend.lane_keys``), takes up to what it wants of each in one
  store step (which also frees what this process's ended jobs held), and
  hands the shards what it got as allowances: a key at its cap loses its
  turn, it does not wait in front of the others. What a key did not use
  is freed at the next step.
* An ACK or a move to PENDING of one of this process's jobs ends the claim
  on the shard first; its slot is freed at the process's next store step,
  within ``FLUSH_S``.
* A dequeue call whose shard stopped answering after it was sent
  (``ShardOutcomeUnknown``) may have claimed jobs nobody was handed: what
  its keys did not use stays held, in doubt, until those claims have
  expired and a monitor pass had time to end them (``slots.doubt_until``).
* A store step that may have been applied though its reply was lost
  (``ShardOutcomeUnknown``) stands: freed again, a slot could be freed
  twice. Either way the owner may hold slots it does not use (what the
  step took, or did not free). This process's own owner, once it has
  nothing running or being claimed, leaves under a new name, and the
  monitor settles the old one to the jobs it runs (none). Any owner, a
  capped queue's too (which keeps its name while its jobs run), is trued
  up once the lost step can no longer be applied (``LATE_STEP_S``): with
  its other steps held back for a moment, what the store says it holds
  beyond what this process accounts for (jobs running, claims under way,
  slots in doubt, frees not yet sent) is freed. Only the owning process
  changes a live owner's per-key counts, so nothing else moves them
  meanwhile.
* What ends a claim without a call here (a claim that expires, an
  operator's delete, an ACK by another process) the process finds by
  looking up its running jobs at least every ``CHECK_S`` while it has any.
* An owner stamps itself at every step and at least every ``REFRESH_S``
  while it holds slots; one not stamped for ``OWNER_STALE_MS`` is gone
  (killed, cut off) and the monitor's pass settles what it holds to the
  jobs it still runs on the shards (``reconcile``), as it does for jobs of
  owners the store does not know (a limit set on a busy queue). It settles
  nobody while a shard cannot be counted: its jobs may be running.

A key-capped dequeue needs the control store: while it cannot be reached
the dequeue fails (``SlotsUnavailable``), as a capped queue's does once
its spare slots are spent: a cap exists to protect the callee, so it
fails closed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pinlater.engine.slots import (
    CHECK_S,
    CLOSE_WAIT_S,
    FLUSH_S,
    OWNER_STALE_MS,
    REFRESH_S,
    Ended,
    Reconciled,
    SlotsUnavailable,
    count_running,
    doubt_until,
)
from pinlater.errors import PinLaterError, ShardConnectionFailed
from pinlater.queue_config import QueueConfig
from pinlater.stores.base import CLAIM_OWNER_LEN, CLAIM_TOKEN_LEN, ShardOutcomeUnknown

if TYPE_CHECKING:
    from pinlater.engine.shards import ShardSet
    from pinlater.stores.control import ControlStore

log = logging.getLogger(__name__)

# A store step not applied this long after it was sent is taken never to
# be: the monitor's settle of an owner gone stale rests on the same bound.
LATE_STEP_S = OWNER_STALE_MS / 1000
# How long a true-up waits for the owner's steps under way to end.
QUIET_WAIT_S = 5.0

# What a claim with allowances does: (allowances, claim token) -> the
# jobs' descriptors and keys, and the first error of a shard.
Collect = Callable[[dict[str, int], str], tuple[list[tuple[str, str]], PinLaterError | None]]
# The claims of RUNNING jobs by descriptor (None: not RUNNING); a job of a
# shard that did not answer is left out.
ClaimsOf = Callable[[str, Sequence[str]], dict[str, "str | None"]]


@dataclass
class _Pool:
    """One key-capped queue's per-key slots as this process holds them."""

    owner: str = field(default_factory=lambda: secrets.token_hex(CLAIM_OWNER_LEN // 2))
    running: dict[str, tuple[str, str]] = field(default_factory=dict)  # descriptor -> (key, claim token)
    frees: dict[tuple[str, str], int] = field(default_factory=dict)  # (owner, key) -> slots to free
    synced_at: dict[str, float] = field(default_factory=dict)  # owner -> last step (monotonic)
    doubt: list[tuple[float, tuple[str, str], int]] = field(default_factory=list)  # (until, (owner, key), n)
    suspect: set[str] = field(default_factory=set)  # owners a lost step may have left holding too much
    # Steps whose replies were lost: (when sent, monotonic; owner; what they freed).
    lost: list[tuple[float, str, dict[tuple[str, str], int]]] = field(default_factory=list)
    stepping: dict[str, int] = field(default_factory=dict)  # owner -> store steps under way
    allowed: dict[tuple[str, str], int] = field(default_factory=dict)  # (owner, key) -> slots of claims under way
    truing: set[str] = field(default_factory=set)  # owners being trued up: their steps wait
    claiming: int = 0  # claims under way under ``owner``
    checked_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)  # the fields above
    quiet: threading.Condition = field(init=False)  # on ``lock``: a step ended, a true-up ended

    def __post_init__(self) -> None:
        self.quiet = threading.Condition(self.lock)


class KeySlots:
    """The per-key slot steps of one process over a control store and the
    shards (see the module doc)."""

    def __init__(self, control: ControlStore, shards: ShardSet, claims_of: ClaimsOf) -> None:
        self._control = control
        self._shards = shards
        self._claims_of = claims_of
        self._pools: dict[str, _Pool] = {}
        self._caps: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pool(self, config: QueueConfig) -> _Pool | None:
        with self._lock:
            pool = self._pools.get(config.name)
            if pool is None and config.key_max_running is not None:
                pool = self._pools[config.name] = _Pool()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._tend, name="pinlater-key-slots", daemon=True)
                    self._thread.start()
            if config.key_max_running is not None:
                self._caps[config.name] = config.key_max_running
            return pool

    # -- a dequeue ----------------------------------------------------------------------------
    def claim(
        self, config: QueueConfig, want: dict[str, int], token: str | None, collect: Collect,
        doubt: Sequence[str] = (),
    ) -> tuple[list[tuple[str, str]], PinLaterError | None]:
        """``collect(allow, token)`` with allowances of at most the slots
        taken for each key of ``want`` (one store step), under ``token``
        (a capped queue's), or this process's own for the queue.
        ``doubt``: filled by ``collect`` with the shards whose outcome it
        does not know; then what the keys did not use stays in doubt."""
        pool = self._pool(config)
        assert pool is not None and config.key_max_running is not None, "claim() is for key-capped queues"
        own = token is None
        with pool.lock:
            if token is None:
                token = pool.owner + secrets.token_hex((CLAIM_TOKEN_LEN - CLAIM_OWNER_LEN) // 2)
                pool.claiming += 1
        try:
            return self._claim(config, config.key_max_running, pool, want, token, collect, doubt)
        finally:
            if own:
                with pool.lock:
                    pool.claiming -= 1

    def _claim(
        self, config: QueueConfig, cap: int, pool: _Pool, want: dict[str, int], token: str, collect: Collect,
        doubt: Sequence[str],
    ) -> tuple[list[tuple[str, str]], PinLaterError | None]:
        owner = token[:CLAIM_OWNER_LEN]
        try:
            granted = self._sync(config.name, cap, pool, owner, want, claim=True)
        except ShardConnectionFailed as exc:
            raise SlotsUnavailable(
                f"queue {config.name!r} has a per-key cap, whose slots are in the control store, "
                f"which cannot be reached: {exc}"
            ) from None
        allow = dict(granted)
        got: list[tuple[str, str]] = []
        try:
            got, error = collect(allow, token)
        finally:
            with pool.lock:
                until = doubt_until(config) if doubt else 0.0
                for key, n in granted.items():
                    _add(pool.allowed, (owner, key), -n)
                    unused = allow.get(key, 0)
                    if unused > 0 and doubt:
                        pool.doubt.append((until, (owner, key), unused))
                    elif unused > 0:
                        pool.frees[(owner, key)] = pool.frees.get((owner, key), 0) + unused
                for descriptor, key in got:
                    if key:
                        pool.running[descriptor] = (key, token)
        return got, error

    def free(self, config: QueueConfig, ended: Sequence[Ended]) -> None:
        """After ACKs or moves to PENDING were applied: the slots of this
        process's jobs among them are freed at its next store step."""
        pool = self._pools.get(config.name) if ended else None
        if pool is None:
            return
        with pool.lock:
            for descriptor, token in ended:
                mine = pool.running.get(descriptor)
                if mine is not None and (token is None or token == mine[1]):
                    self._end(pool, descriptor)

    @staticmethod
    def _end(pool: _Pool, descriptor: str) -> None:
        key, token = pool.running.pop(descriptor)
        at = (token[:CLAIM_OWNER_LEN], key)
        pool.frees[at] = pool.frees.get(at, 0) + 1

    # -- store steps --------------------------------------------------------------------------
    def _sync(
        self, queue: str, cap: int, pool: _Pool, owner: str, want: dict[str, int], leaving: bool = False,
        claim: bool = False,
    ) -> dict[str, int]:
        """One store step of ``owner``: its pending frees, then ``want``
        (with ``claim``, what it grants counts as claims under way until
        the claim says what it used)."""
        with pool.lock:
            while owner in pool.truing:
                pool.quiet.wait()
            frees = {at: n for at, n in pool.frees.items() if at[0] == owner}
            for at in frees:
                del pool.frees[at]
            _add(pool.stepping, owner, 1)
            sent_at = time.monotonic()
        try:
            granted = self._control.key_slots_sync(queue, cap, owner, want, frees, leaving)
        except BaseException as exc:
            with pool.lock:
                if isinstance(exc, ShardOutcomeUnknown):
                    # It may hold what it freed, or was granted (the module doc).
                    pool.lost.append((sent_at, owner, frees))
                    if owner == pool.owner:
                        pool.suspect.add(owner)
                else:
                    for at, n in frees.items():
                        pool.frees[at] = pool.frees.get(at, 0) + n
                self._stepped(pool, owner)
            raise
        with pool.lock:
            pool.synced_at[owner] = time.monotonic()
            if claim:
                for key, n in granted.items():
                    _add(pool.allowed, (owner, key), n)
            self._stepped(pool, owner)
        return granted

    @staticmethod
    def _stepped(pool: _Pool, owner: str) -> None:
        _add(pool.stepping, owner, -1)
        pool.quiet.notify_all()

    def _true_up(self, queue: str, pool: _Pool, cap: int) -> None:
        """Free what owners whose lost steps can no longer be applied hold
        beyond what this process accounts for (the module doc)."""
        with pool.lock:
            late_before = time.monotonic() - LATE_STEP_S
            due = {owner for sent_at, owner, _ in pool.lost if sent_at <= late_before}
            # Steps that can no longer apply become one mark per owner: an outage piles up none.
            pool.lost = [step for step in pool.lost if step[0] > late_before] + [(0.0, owner, {}) for owner in due]
        for owner in due:

            def steps_ended(o: str = owner) -> bool:
                return not pool.stepping.get(o)

            with pool.lock:
                pool.truing.add(owner)  # new steps of the owner wait from here
                quiet = pool.quiet.wait_for(steps_ended, QUIET_WAIT_S)
            try:
                if quiet:
                    self._true_up_owner(queue, pool, cap, owner)
            finally:
                with pool.lock:
                    pool.truing.discard(owner)
                    pool.quiet.notify_all()

    def _true_up_owner(self, queue: str, pool: _Pool, cap: int, owner: str) -> None:
        _, _, held = self._control.key_slots_owners(queue)
        with pool.lock:
            late_before = time.monotonic() - LATE_STEP_S
            used: dict[str, int] = {}
            for key, token in pool.running.values():
                if token.startswith(owner):
                    _add(used, key, 1)
            # What lost steps that may still be applied freed is held till they are.
            young = [step for step in pool.lost if step[1] == owner and step[0] > late_before]
            pending = [*pool.allowed.items(), *pool.frees.items(), *(at_n for _, _, f in young for at_n in f.items()),
                       *((at, n) for _, at, n in pool.doubt)]
            for (o, key), n in pending:
                if o == owner:
                    _add(used, key, n)
            pool.lost = [step for step in pool.lost if step[1] != owner or step[0] > late_before]
            excess = {(o, key): n - used.get(key, 0) for (o, key), n in held.items()
                      if o == owner and n > used.get(key, 0)}
        if not excess:
            return
        sent_at = time.monotonic()
        try:
            self._control.key_slots_sync(queue, cap, owner, {}, excess)
        except BaseException as exc:
            with pool.lock:
                # Maybe applied: as any lost step. Not applied: due again at the next pass.
                unknown = isinstance(exc, ShardOutcomeUnknown)
                pool.lost.append((sent_at if unknown else 0.0, owner, excess if unknown else {}))
            raise
        log.info("per-key slots of %s: %d held beyond the jobs of a process, after a lost store step, freed",
                 queue, sum(excess.values()))

    def _owners(self, pool: _Pool) -> set[str]:
        """The owners this process holds per-key slots under."""
        with pool.lock:
            return self._owners_locked(pool)

    @staticmethod
    def _owners_locked(pool: _Pool) -> set[str]:
        return ({token[:CLAIM_OWNER_LEN] for _, token in pool.running.values()}
                | {o for o, _ in pool.frees} | {o for _, (o, _), _ in pool.doubt})

    def _check(self, queue: str, pool: _Pool) -> None:
        """Free the slots of this process's jobs no longer RUNNING under
        its claim."""
        pool.checked_at = time.monotonic()
        with pool.lock:
            mine = dict(pool.running)
        found = self._claims_of(queue, list(mine))
        with pool.lock:
            for d, claim in found.items():
                if pool.running.get(d) == mine[d] and (claim is None or not claim.startswith(mine[d][1])):
                    self._end(pool, d)

    def _tend(self) -> None:
        while not self._stop.wait(FLUSH_S):
            with self._lock:
                pools = [(q, p, self._caps[q]) for q, p in self._pools.items()]
            for queue, pool, cap in pools:
                try:
                    self._tend_pool(queue, pool, cap)
                except PinLaterError as exc:
                    log.warning("per-key slots of %s: %s", queue, exc)
                except Exception:
                    log.exception("per-key slots of %s", queue)

    def _tend_pool(self, queue: str, pool: _Pool, cap: int) -> None:
        now = time.monotonic()
        with pool.lock:
            for until, at, n in pool.doubt:
                if until <= now:
                    pool.frees[at] = pool.frees.get(at, 0) + n
            pool.doubt = [entry for entry in pool.doubt if entry[0] > now]
        if pool.running and now - pool.checked_at >= CHECK_S:
            self._check(queue, pool)
        self._leave_if_suspect(queue, pool, cap)
        if pool.lost:
            self._true_up(queue, pool, cap)
        for owner in self._owners(pool):
            with pool.lock:
                due = any(o == owner for o, _ in pool.frees) or now - pool.synced_at.get(owner, -1e9) >= REFRESH_S
            if due:
                self._sync(queue, cap, pool, owner, {})

    def _leave_if_suspect(self, queue: str, pool: _Pool, cap: int) -> None:
        """An owner that may hold slots it does not use, with nothing of its
        own running or being claimed: claims go on under a new name, and
        the old one leaves, for the monitor to settle to the jobs it runs."""
        with pool.lock:
            old = pool.owner
            if old not in pool.suspect or pool.claiming or any(o == old for o in self._owners_locked(pool)):
                return
            pool.owner = secrets.token_hex(CLAIM_OWNER_LEN // 2)
            pool.suspect.discard(old)
            pool.lost = [step for step in pool.lost if step[1] != old]  # the monitor settles it
        self._sync(queue, cap, pool, old, {}, leaving=True)

    def close(self) -> None:
        """Free what can be freed and leave: the monitor settles the slots
        of jobs still running at its next pass."""
        self._stop.set()
        with self._lock:
            thread = self._thread
            pools = [(q, p, self._caps[q]) for q, p in self._pools.items()]
        if thread is not None:
            thread.join(CLOSE_WAIT_S)
        for queue, pool, cap in pools:
            for owner in self._owners(pool):
                try:
                    self._sync(queue, cap, pool, owner, {}, leaving=True)
                except PinLaterError as exc:
                    log.warning("per-key slots of %s not freed (the monitor settles them): %s", queue, exc)

    # -- the monitor's step -------------------------------------------------------------------
    def reconcile(self, config: QueueConfig) -> Reconciled:
        """Settle the per-key slots of owners gone (not synced for
        ``OWNER_STALE_MS``) or unknown to the store to the jobs they have
        running, if every shard answers."""
        queue = config.name
        now, stamps, held = self._control.key_slots_owners(queue)
        out = Reconciled(held=sum(held.values()))
        counts = {at: n for at, n in count_running(self._shards, config, out.shards_skipped, "per-key slots").items()
                  if at[1]}
        if out.shards_skipped:
            return out
        stale_before = now - OWNER_STALE_MS
        settle = {at: counts.get(at, 0) for at in held if stamps.get(at[0], -1) < stale_before}
        settle.update({at: n for at, n in counts.items() if at[0] not in stamps})
        freed = self._control.key_slots_settle(queue, settle, stale_before)
        out.freed, out.added = max(0, freed), max(0, -freed)
        out.held -= freed
        return out


def _add(counts: dict[Any, int], at: Any, n: int) -> None:
    """``counts[at] += n``, an entry only while above 0."""
    v = counts.get(at, 0) + n
    if v > 0:
        counts[at] = v
    else:
        counts.pop(at, None)
