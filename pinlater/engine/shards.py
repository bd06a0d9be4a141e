"""The shard set and its health monitor.

A shard that fails with a connection error, or answers but refuses to write,
is taken out of rotation at once (enqueue and dequeue stop choosing it); a
background prober makes a small write on every shard each interval, takes
out one that fails it and puts a failed one back as soon as it takes the
write again (a PING would pass on a shard that is read-only or out of
memory), but for one that refused writes again soon after it came back,
which is held out longer each time (REFUSAL_WINDOW_S). A full connection
pool is load and changes nothing. One dead shard never stops the cluster.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from pinlater.errors import InvalidRequest, NoHealthyShards, PinLaterError, QueueDeleted, StorageError
from pinlater.observe import tracing
from pinlater.observe.seam import Seam
from pinlater.stores.base import ShardBackend, ShardBusy, ShardUnavailable, ShardWriteRefused

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that are not connection failures still take a shard out after this
# many in a row (a deadlocked or broken MySQL answers, but uselessly).
MAX_CONSECUTIVE_ERRORS = 3
# Why a shard is out of rotation (``ShardHealth.out_reason``).
UNAVAILABLE = "unavailable"
REFUSES_WRITES = "refuses writes"
FAILING = "failing"
SAME_STORE = "same store as another shard"
# A failure that a caller gets past (a dequeue going on with the other
# shards, an enqueue going to another) is logged at most this often per shard.
WARN_INTERVAL_S = 1.0
# A shard that refuses writes again within REFUSAL_WINDOW_S of coming back
# (the probe's small write fits on a disk too full for jobs) stays out
# after its next good probe for a hold that doubles at each such return,
# from FIRST_HOLD_S up to MAX_HOLD_S; one that keeps taking writes for the
# window starts afresh.
REFUSAL_WINDOW_S = 60.0
FIRST_HOLD_S = 2.0
MAX_HOLD_S = 120.0


class SameStore(StorageError):
    """Two shard ids reach one store: the later one stays out of rotation."""


@dataclass(slots=True)
class ShardHealth:
    healthy: bool = True
    consecutive_errors: int = 0
    last_error: str | None = None
    changed_at: float = 0.0  # wall time, as shown
    last_probe_at: float = 0.0
    # While out of rotation: UNAVAILABLE, REFUSES_WRITES, FAILING or SAME_STORE.
    out_reason: str | None = None
    # Out of rotation until then at least (wall time, as shown), whatever its
    # probe says (a shard that came back and refused writes again:
    # REFUSAL_WINDOW_S); 0: none.
    held_until: float = 0.0
    hold_s: float = 0.0  # the last such hold, doubled at the next
    # The same instants on time.monotonic(), which decides: a wall clock set
    # back an hour must not hold a shard out for an hour.
    changed_mono: float = 0.0
    held_until_mono: float = 0.0
    refused_mono: float = 0.0  # when it last went out refusing writes

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "out_reason": self.out_reason,
            "consecutive_errors": self.consecutive_errors,
            "last_error": self.last_error,
            "changed_at": self.changed_at,
            "last_probe_at": self.last_probe_at,
            "held_until": self.held_until,
        }


def _changed(health: ShardHealth) -> None:
    health.changed_at = time.time()
    health.changed_mono = time.monotonic()


class ShardSet:
    def __init__(self, backends: Sequence[ShardBackend], probe_interval_s: float = 1.0) -> None:
        if not backends:
            raise ValueError("a shard set needs at least one shard")
        self._backends = {b.shard_id: b for b in backends}
        self._order = [b.shard_id for b in backends]
        self._health = {sid: ShardHealth(changed_at=time.time(), changed_mono=time.monotonic())
                        for sid in self._order}
        self._lock = threading.Lock()
        self._probe_interval_s = probe_interval_s
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None
        self._on_recover: list[Callable[[ShardBackend], None]] = []
        self._on_queue_deleted: list[Callable[[ShardBackend, str], bool]] = []
        self._warned_at = dict.fromkeys(self._order, -WARN_INTERVAL_S)
        self._store_ids: dict[str, str] = {}  # each shard's store, as its last probe found it
        self.seam = Seam()

    # -- lookup ---------------------------------------------------------------
    @property
    def ids(self) -> list[str]:
        return list(self._order)

    def get(self, shard_id: str) -> ShardBackend:
        try:
            return self._backends[shard_id]
        except KeyError:
            raise InvalidRequest(
                f"descriptor names shard {shard_id!r}, which is not one of {self._order}"
            ) from None

    def all(self) -> list[ShardBackend]:
        return [self._backends[s] for s in self._order]

    def healthy(self) -> list[ShardBackend]:
        with self._lock:
            return [self._backends[s] for s in self._order if self._health[s].healthy]

    def healthy_shuffled(self) -> list[ShardBackend]:
        shards = self.healthy()
        random.shuffle(shards)
        return shards

    def require_healthy(self) -> list[ShardBackend]:
        shards = self.healthy_shuffled()
        if not shards:
            raise NoHealthyShards(f"all {len(self._order)} shards are out of rotation")
        return shards

    def is_healthy(self, shard_id: str) -> bool:
        with self._lock:
            return self._health[shard_id].healthy

    def status(self) -> dict[str, ShardHealth]:
        """Each shard's health now (copies: they do not change later)."""
        with self._lock:
            return {s: replace(self._health[s]) for s in self._order}

    # -- bookkeeping ------------------------------------------------------------
    def call(self, backend: ShardBackend, op: str, queue: str | None, fn: Callable[[ShardBackend], T]) -> T:
        """Run ``fn`` on a shard, recording the outcome in its health and
        reporting it to the seam (``pinlater.observe.seam``) as operation ``op`` of
        ``queue`` (None: of no one queue). If the shard answers that the
        queue was deleted there but a hook (``on_queue_deleted``) finds it
        exists and gives the shard its storage again, ``fn`` runs once more."""
        seam = self.seam
        span = tracing.start_store_span(op, backend.shard_id, queue) if tracing.ON else None
        start = time.perf_counter()
        try:
            try:
                result = self._call(backend, fn)
            except QueueDeleted as exc:
                if not any(revive(backend, exc.queue) for revive in self._on_queue_deleted):
                    raise
                result = self._call(backend, fn)
        except BaseException as exc:
            seam.failed(backend.shard_id, op, time.perf_counter() - start, exc, span)
            raise
        seam.done(backend.shard_id, op, queue, time.perf_counter() - start, result, span)
        return result

    def _call(self, backend: ShardBackend, fn: Callable[[ShardBackend], T]) -> T:
        try:
            result = fn(backend)
        except ShardUnavailable as exc:
            self.mark_down(backend.shard_id, exc)
            raise
        except ShardWriteRefused as exc:
            # Every transition writes: the shard is of no use until it writes again.
            self.mark_down(backend.shard_id, exc, REFUSES_WRITES)
            raise
        except ShardBusy as exc:
            self._note_busy(backend.shard_id, exc)
            raise
        except QueueDeleted:
            self._record_ok(backend.shard_id)  # an answer from a working shard
            raise
        except PinLaterError as exc:
            self._record_error(backend.shard_id, exc)
            raise
        except Exception as exc:
            # Callers catch PinLaterError: nothing of a driver's gets past here.
            self._record_error(backend.shard_id, exc)
            raise StorageError(f"shard {backend.shard_id}: {type(exc).__name__}: {exc}") from exc
        self._record_ok(backend.shard_id)
        return result

    def mark_down(self, shard_id: str, error: BaseException, reason: str = UNAVAILABLE) -> None:
        with self._lock:
            health = self._health[shard_id]
            health.consecutive_errors += 1
            health.last_error = f"{type(error).__name__}: {error}"
            health.out_reason = reason  # the latest cause, also for a shard already out
            if health.healthy:
                back_for = self._hold(health) if reason == REFUSES_WRITES else False
                health.healthy = False
                _changed(health)
                if back_for is False:
                    log.warning("shard %s out of rotation (%s): %s", shard_id, reason, health.last_error)
                else:
                    log.warning("shard %s out of rotation (%s) for %g s at least: it refused writes again %.1f s "
                                "after it came back: %s", shard_id, reason, health.hold_s, back_for,
                                health.last_error)

    @staticmethod
    def _hold(health: ShardHealth) -> float | bool:
        """A shard in rotation now refuses writes: if it came back from
        refusing them less than REFUSAL_WINDOW_S ago, its hold is set and
        how long it had been back is returned; else False."""
        now = time.monotonic()
        back_for = now - health.changed_mono
        again = health.refused_mono > 0.0 and back_for < REFUSAL_WINDOW_S
        health.refused_mono = now
        if not again:
            health.hold_s = health.held_until = health.held_until_mono = 0.0
            return False
        health.hold_s = min(max(2 * health.hold_s, FIRST_HOLD_S), MAX_HOLD_S)
        health.held_until_mono = now + health.hold_s
        health.held_until = time.time() + health.hold_s
        return back_for

    def _note_busy(self, shard_id: str, error: BaseException) -> None:
        # Load, not a fault of the shard: said, but neither counted nor acted on.
        with self._lock:
            self._health[shard_id].last_error = f"{type(error).__name__}: {error}"

    def warn(self, shard_id: str, message: str, *args: object) -> None:
        """A warning about a shard that a caller went on without, logged at
        most once per WARN_INTERVAL_S for that shard (a dequeue loop would
        otherwise log each of its calls)."""
        now = time.monotonic()
        if now - self._warned_at[shard_id] >= WARN_INTERVAL_S:
            self._warned_at[shard_id] = now
            log.warning(message, *args)

    def _record_error(self, shard_id: str, error: BaseException) -> None:
        with self._lock:
            health = self._health[shard_id]
            health.consecutive_errors += 1
            health.last_error = f"{type(error).__name__}: {error}"
            if health.healthy and health.consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                health.healthy = False
                health.out_reason = FAILING
                _changed(health)
                log.warning("shard %s out of rotation after %d errors: %s",
                            shard_id, health.consecutive_errors, health.last_error)

    def _record_ok(self, shard_id: str) -> None:
        health = self._health[shard_id]
        # Nearly every call finds nothing to reset: read without the lock
        # (an error recorded meanwhile is as if it came after this call).
        if health.consecutive_errors:
            with self._lock:
                health.consecutive_errors = 0

    def _mark_up(self, shard_id: str) -> bool:
        with self._lock:
            health = self._health[shard_id]
            health.consecutive_errors = 0
            if health.healthy or time.monotonic() < health.held_until_mono:
                return False
            health.healthy = True
            health.out_reason = None
            _changed(health)
        log.warning("shard %s back in rotation", shard_id)
        return True

    # -- probing ------------------------------------------------------------------
    def on_recover(self, callback: Callable[[ShardBackend], None]) -> None:
        """Called (in the prober thread) when a shard comes back."""
        self._on_recover.append(callback)

    def on_queue_deleted(self, callback: Callable[[ShardBackend, str], bool]) -> None:
        """Called with the shard and the queue when a shard answers that the
        queue was deleted there; True if the shard now has its storage."""
        self._on_queue_deleted.append(callback)

    def probe_once(self) -> None:
        """Each shard's write probe (``ShardBackend.probe``): a shard that
        fails it is out of rotation, one that passes it is in."""
        for shard_id in self._order:
            backend = self._backends[shard_id]
            try:
                backend.probe()
                twin = self._same_store_as(shard_id, backend.store_id())
            except ShardBusy:
                continue  # no connection free to ask: no verdict either way
            except ShardWriteRefused as exc:
                self.mark_down(shard_id, exc, REFUSES_WRITES)
                continue
            except Exception as exc:  # noqa: BLE001 -- any other failure of a probe marks the shard down
                self.mark_down(shard_id, exc)
                continue
            finally:
                with self._lock:
                    self._health[shard_id].last_probe_at = time.time()
            if twin is not None:
                self.mark_down(shard_id, SameStore(
                    f"shard {shard_id} is the store shard {twin} is (store id {self._store_ids[shard_id]}): its "
                    "jobs would be served and counted twice; give each shard id a store of its own"), SAME_STORE)
                continue
            if self._mark_up(shard_id):
                for callback in self._on_recover:
                    try:
                        callback(backend)
                    except PinLaterError as exc:
                        # The store failing again (too many connections, a disk
                        # too full for the queue's tables): one line, and the
                        # shard's last error is that error, for its reason.
                        log.warning("recovery hook failed for shard %s: %s", shard_id, exc)
                        self.mark_down(shard_id, exc, REFUSES_WRITES if isinstance(exc, ShardWriteRefused) else
                                       UNAVAILABLE if isinstance(exc, ShardUnavailable) else FAILING)
                    except Exception as exc:
                        log.exception("recovery hook failed for shard %s", shard_id)
                        self.mark_down(shard_id, exc, FAILING)

    def _same_store_as(self, shard_id: str, store_id: str) -> str | None:
        """Notes the store ``shard_id`` reaches; the shard before it in the
        configuration that reaches the same store, if one does. A store
        whose id changed lost its data (or the address reaches another)."""
        with self._lock:
            before = self._store_ids.get(shard_id)
            self._store_ids[shard_id] = store_id
            earlier = self._order[:self._order.index(shard_id)]
            twin = next((s for s in earlier if self._store_ids.get(s) == store_id), None)
        if before is not None and before != store_id:
            log.error("shard %s is not the store it was (store id %s, now %s): it lost its data, or its address "
                      "now reaches another store; the jobs it held are not there", shard_id, before, store_id)
        return twin

    def start_probing(self) -> None:
        if self._prober is not None:
            return
        self._prober = threading.Thread(target=self._probe_loop, name="pinlater-shard-prober", daemon=True)
        self._prober.start()

    def _probe_loop(self) -> None:
        while not self._stop.wait(self._probe_interval_s):
            self.probe_once()

    def close(self) -> None:
        self._stop.set()
        if self._prober is not None:
            self._prober.join(timeout=5)
        for backend in self._backends.values():
            backend.close()
