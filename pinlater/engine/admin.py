"""Queue administration of the job service (``QueueAdminMixin``, which
``JobService`` is made of): create, delete and configure queues at run
time; retry failed jobs; delete jobs."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.descriptor import JobDescriptor
from pinlater.engine.caller import current as current_caller
from pinlater.engine.reads import BodySearch, body_search, matching_records, priorities_of
from pinlater.engine.settle import checked_descriptor, free_ended
from pinlater.engine.slots import counts_claims
from pinlater.errors import (
    InvalidRequest,
    PasswordInvalid,
    PinLaterError,
    QueueDeleted,
    ShardConnectionFailed,
    StorageError,
)
from pinlater.models import CANCELLED_STATUS, CancelResult
from pinlater.queue_config import QueueConfig, validate_queue_name
from pinlater.settings import hash_secret
from pinlater.states import JobState
from pinlater.stores.base import CLAIM_TOKEN_LEN, Cancelled, ShardBackend, ShardUnavailable, ShardWriteRefused
from pinlater.stores.control import ENDED_FAILED
from pinlater.validation import check_attempts, check_batch, check_limit, check_timestamp

if TYPE_CHECKING:
    from pinlater.engine.core import Core

log = logging.getLogger(__name__)

# A queue config change read again this many times when another writer
# changes the config between its read and its write.
CONFIG_TRIES = 10


class QueueAdminMixin:
    """Queues and the operator's actions on their jobs, over the ``core``
    the service holds. Deleting by body regex finds its jobs with the
    reads' body search (``pinlater.engine.reads``)."""

    core: Core

    # -- queues -----------------------------------------------------------------
    @declared(PinLaterClient.create_queue)
    def create_queue(self, a: Call) -> QueueConfig:
        """Idempotent: an existing queue keeps its config and is returned.
        A caller without the right to create queues (``pinlater.engine.caller``)
        only declares one: see ``_declare``."""
        name = a.name
        validate_queue_name(name)
        # None means "the default"; any other value is checked, never replaced.
        fields = {key: value for key, value in vars(a).items() if key != "name" and value is not None}
        fields.setdefault("priorities", self.core.settings.default_priorities)
        try:
            config = QueueConfig(name=name, **fields)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if not current_caller().creates_queues:
            return self._declare(name)
        if not self.core.control.create_queue(config):
            config = self.core.control.get_queue(name) or config
        made, missed = 0, None
        for backend in self.core.shards.healthy():
            try:
                self.core.shards.call(backend, "create_queue", name,
                                      lambda b: b.create_queue(name, config.priorities))
                made += 1
            except (ShardUnavailable, ShardWriteRefused) as exc:
                # Out of rotation now: its probe's recovery makes the queue's
                # storage there (ensure_queues_on), as for a shard down before.
                missed = exc
                log.warning("queue %s created without shard %s, which will have it when it is back: %s",
                            name, backend.shard_id, exc)
        if missed is not None and made == 0:
            raise missed
        self.core.configs.forget(name)
        return config

    def _declare(self, name: str) -> QueueConfig:
        """A "create" of an existing queue by a caller who may not create
        one: one fresh read of the stored config, and nothing written, so
        it can never bring back a queue deleted since the caller (or the
        server's cache) last saw it. Not even the shards' storage: that
        would clear a concurrent delete's mark on them."""
        config = self.core.control.get_queue(name)
        if config is None:
            raise PasswordInvalid(f"{current_caller().identity!r} may not create queue {name!r}: it does not exist "
                                  "(it may have just been deleted), and only the admin role creates queues")
        return config

    def delete_queue(self, name: str, password: str | None) -> None:
        """Drops the queue and every job in it, on every shard. Needs the
        configured admin secret; idempotent, so a delete cut short by a
        shard failing midway is finished by running it again."""
        validate_queue_name(name)
        self.check_admin_secret(password)
        down = [s for s in self.core.shards.ids if not self.core.shards.is_healthy(s)]
        if down:
            raise ShardConnectionFailed(
                f"cannot delete queue {name!r} while shards {down} are down: its jobs there would survive"
            )
        # The config goes first. A process still holding it in its cache then
        # finds the queue deleted on the shard (QueueDeleted), reads the config
        # again and finds no queue: no enqueue gives the queue storage again.
        self.core.control.delete_queue(name)
        self.core.configs.forget(name)
        for backend in self.core.shards.all():
            self.core.shards.call(backend, "delete_queue", name, lambda b: b.delete_queue(name))

    def check_admin_secret(self, password: str | None) -> None:
        """PasswordInvalid unless ``password`` is the configured admin secret;
        a caller with too many wrong ones lately is refused unchecked
        (``pinlater.kit.secret_throttle``)."""
        expected = self.core.settings.admin_secret_sha256
        if expected is None:
            raise PasswordInvalid("no admin secret is configured (PINLATER_ADMIN_SECRET); refusing")
        who = current_caller().identity
        self.core.admin_throttle.check(who)
        if password is None or not hmac.compare_digest(hash_secret(password), expected):
            self.core.admin_throttle.failed(who)
            raise PasswordInvalid("wrong admin secret")
        self.core.admin_throttle.succeeded(who)

    def queue_names(self) -> set[str]:
        """Every queue's name."""
        # Names from the stored texts: a queue whose config is damaged still exists.
        return set(self.core.control.queue_config_texts())

    def update_queue(self, name: str, **changes: object) -> QueueConfig:
        """Change a queue's config at run time (rate, pause, concurrency cap,
        claim timeout, retry policy, retention); every process sees it
        within config_ttl_s. A cap set counts the jobs already running at
        once (``pinlater.engine.slots``)."""
        for _ in range(CONFIG_TRIES):
            current = self.core.configs.get(name, fresh=True)
            if "priorities" in changes and changes["priorities"] != current.priorities:
                raise InvalidRequest("the number of priorities of an existing queue cannot change")
            try:
                updated = current.with_changes(**changes)
            except (TypeError, ValueError) as exc:
                raise InvalidRequest(f"invalid queue change: {exc}") from None
            # Compare-and-set: a change made by another caller (an operator,
            # an enqueue marking the queue as one with batches) since the
            # read is kept, and this one applied over it.
            replaced = self.core.control.replace_queue(current, updated)
            self.core.configs.forget(name)
            if replaced:
                break
        else:
            raise StorageError(f"queue {name!r}'s config changed under this change {CONFIG_TRIES} times in a row; "
                               "nothing was changed: send it again")
        if updated.max_running != current.max_running:
            self.core.slots.set_cap(updated)
        if updated.key_max_running is not None and updated.key_max_running != current.key_max_running:
            self.core.key_slots.reconcile(updated)  # the jobs already running count at once
        return updated

    # -- operator actions ------------------------------------------------------------------
    @declared(PinLaterClient.retry_failed)
    def retry_failed(self, a: Call) -> int:
        """FAILED -> PENDING with ``attempts`` granted, up to ``limit`` jobs."""
        queue, attempts, run_after_ms, limit = a.queue, a.attempts, a.run_after_ms, a.limit
        config = self.core.configs.get(queue)
        check_attempts(attempts)
        check_limit(limit)
        check_timestamp(run_after_ms)
        priorities = priorities_of(config, a.priority)
        done = 0
        for backend in self.core.shards.require_healthy():
            for p in priorities:
                if done < limit:
                    done += self._retry_failed_on(backend, queue, p, attempts, run_after_ms, limit - done)
        return done

    @declared(PinLaterClient.delete_jobs)
    def delete_jobs(self, a: Call) -> int:
        """Deletes up to ``limit`` jobs in ``state`` (optionally only those
        whose body matches ``body_regex``). With a regex, every match is found
        first, within the call's regex budget, and only then deleted: a search
        that hits the budget fails with RegexBudgetExceeded having deleted
        nothing."""
        queue, state, limit = a.queue, JobState.parse(a.state), a.limit
        config = self.core.configs.get(queue)
        check_limit(limit)
        search = body_search(self.core.settings, a.body_regex)
        priorities = priorities_of(config, a.priority)
        backends = self.core.shards.require_healthy()
        if search is not None:
            return self._delete_matching(queue, state, priorities, backends, search, limit)
        done = 0
        for backend in backends:
            for p in priorities:
                if done >= limit:
                    return done
                done += self._delete_on(backend, queue, p, state, None, limit - done)
        return done

    def _delete_matching(
        self,
        queue: str,
        state: JobState,
        priorities: Sequence[int],
        backends: Sequence[ShardBackend],
        search: BodySearch,
        limit: int,
    ) -> int:
        found: list[tuple[ShardBackend, int, list[int]]] = []
        wanted = limit
        for backend in backends:
            for p in priorities:
                if wanted <= 0:
                    break
                # PENDING means runnable and scheduled alike, as without a regex.
                ids = [
                    r.local_id
                    for future in ((False, True) if state is JobState.PENDING else (False,))
                    for r in matching_records(
                        self.core, backend, queue, p, state, search, wanted, future, what="delete",
                        narrow="nothing was deleted; give a priority, a smaller limit, or a state with fewer jobs")
                ][:wanted]
                if ids:
                    found.append((backend, p, ids))
                    wanted -= len(ids)
        done = 0
        for backend, p, ids in found:
            done += self._delete_on(backend, queue, p, state, ids, len(ids))
        return done

    @declared(PinLaterClient.cancel)
    def cancel(self, a: Call) -> CancelResult:
        """PENDING and RUNNING jobs end FAILED now, one store call per shard
        and priority; the slots of the running ones are freed at once."""
        queue = a.queue
        config = self.core.configs.get(queue)
        # The call's size as sent; then each job once, however often it is named.
        check_batch(len(a.descriptors), self.core.settings.max_jobs_per_call, "descriptors")
        descriptors = list(dict.fromkeys(a.descriptors))
        groups: dict[tuple[str, int], list[JobDescriptor]] = {}
        for text in descriptors:
            d = checked_descriptor(self.core, queue, config, text)
            groups.setdefault((d.shard, d.priority), []).append(d)
        result = CancelResult()
        ended: list[tuple[str, str | None]] = []
        for (shard_id, priority), group in groups.items():
            ids = [d.local_id for d in group]
            try:
                found = self._cancel_on(self.core.shards.get(shard_id), queue, priority, ids)
            except QueueDeleted:
                result.unknown += [str(d) for d in group]
                continue
            except PinLaterError as exc:
                result.unapplied.update((str(d), f"shard {shard_id}: {exc}") for d in group)
                continue
            for d, c in zip(group, found, strict=True):
                text = str(d)
                if c.state is None:
                    result.unknown.append(text)
                elif c.state is JobState.PENDING:
                    result.cancelled.append(text)
                elif c.state is JobState.RUNNING:
                    result.interrupted.append(text)
                    ended.append((text, c.claim[:CLAIM_TOKEN_LEN] if c.claim else None))
                else:
                    result.finished.append(text)
        if ended and counts_claims(config):
            free_ended(self.core, config, ended)
        if config.batches and (result.cancelled or result.interrupted):
            self.core.batch_ends.add(dict.fromkeys([*result.cancelled, *result.interrupted], ENDED_FAILED))
        if result.cancelled or result.interrupted:
            log.info("cancelled %d pending and %d running jobs of %s", len(result.cancelled),
                     len(result.interrupted), queue)
        return result

    # -- shard calls, one typed helper each ----------------------------------------
    def _cancel_on(self, backend: ShardBackend, queue: str, priority: int, ids: list[int]) -> list[Cancelled]:
        return self.core.shards.call(
            backend, "cancel", queue, lambda b: b.cancel(queue, priority, ids, CANCELLED_STATUS)
        )

    def _retry_failed_on(
        self, backend: ShardBackend, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        return self.core.shards.call(
            backend, "retry_failed", queue, lambda b: b.retry_failed(queue, priority, attempts, run_after_ms, limit)
        )

    def _delete_on(
        self, backend: ShardBackend, queue: str, priority: int, state: JobState, ids: list[int] | None, limit: int
    ) -> int:
        return self.core.shards.call(backend, "delete", queue, lambda b: b.delete(queue, priority, state, ids, limit))
