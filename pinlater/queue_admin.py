"""Queue administration and operator actions of the job service: create,
delete and configure queues at run time; retry failed jobs; delete jobs."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from pinlater.backends.base import JobRecord, ShardBackend
from pinlater.control.base import ControlStore
from pinlater.counters import RETRIED_BY_OPERATOR, EventCounters
from pinlater.errors import InvalidRequest, PasswordInvalid, QueueNotFound, ShardConnectionFailed
from pinlater.queue_config import QueueConfig, validate_queue_name
from pinlater.retry import RetryPolicy
from pinlater.settings import Settings, hash_secret
from pinlater.shards import ShardSet
from pinlater.states import JobState
from pinlater.validation import check_attempts, check_limit, check_priority, check_timestamp

if TYPE_CHECKING:
    from pinlater.inspection import BodySearch

T = TypeVar("T")
log = logging.getLogger(__name__)


class QueueAdminMixin:
    settings: Settings
    shards: ShardSet
    control: ControlStore
    _config_cache: dict[str, tuple[float, QueueConfig]]
    _cache_lock: threading.Lock
    counters: EventCounters

    if TYPE_CHECKING:

        def _on_shard(self, backend: ShardBackend, fn: Callable[[ShardBackend], T]) -> T:
            raise NotImplementedError

        def _body_search(self, body_regex: str | None, max_bodies: int | None = None) -> BodySearch | None:
            raise NotImplementedError

        def _matching_records(
            self,
            backend: ShardBackend,
            queue: str,
            priority: int,
            state: JobState,
            search: BodySearch,
            limit: int | None,
            future: bool = False,
            *,
            what: str,
            narrow: str,
        ) -> Iterator[JobRecord]:
            raise NotImplementedError

    # -- queues -----------------------------------------------------------------
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
    ) -> QueueConfig:
        """Idempotent: an existing queue keeps its config and is returned."""
        validate_queue_name(name)
        # None means "the default"; any other value is checked, never replaced.
        fields: dict[str, object] = {
            "priorities": self.settings.default_priorities if priorities is None else priorities
        }
        for key, value in (
            ("max_dequeue_rate", max_dequeue_rate),
            ("claim_timeout_ms", claim_timeout_ms),
            ("retry", retry),
            ("succeeded_retention_ms", succeeded_retention_ms),
            ("failed_retention_ms", failed_retention_ms),
        ):
            if value is not None:
                fields[key] = value
        try:
            config = QueueConfig(name=name, **fields)  # type: ignore[arg-type]
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        if not self.control.create_queue(config):
            config = self.control.get_queue(name) or config
        for backend in self.shards.healthy():
            self._on_shard(backend, lambda b: b.create_queue(name, config.priorities))
        self._forget_config(name)
        return config

    def delete_queue(self, name: str, password: str | None) -> None:
        """Drops the queue and every job in it, on every shard. Needs the
        configured admin secret; idempotent."""
        validate_queue_name(name)
        self.check_admin_secret(password)
        down = [s for s in self.shards.ids if not self.shards.is_healthy(s)]
        if down:
            raise ShardConnectionFailed(
                f"cannot delete queue {name!r} while shards {down} are down: its jobs there would survive"
            )
        for backend in self.shards.all():
            self._on_shard(backend, lambda b: b.delete_queue(name))
        self.control.delete_queue(name)
        self._forget_config(name)

    def check_admin_secret(self, password: str | None) -> None:
        expected = self.settings.admin_secret_sha256
        if expected is None:
            raise PasswordInvalid("no admin secret is configured (PINLATER_ADMIN_SECRET); refusing")
        if password is None or not hmac.compare_digest(hash_secret(password), expected):
            raise PasswordInvalid("wrong admin secret")

    def queue_names(self) -> set[str]:
        # Names from the stored texts: a queue whose config is damaged still exists.
        return set(self.control.queue_config_texts())

    def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config, cached for ``config_ttl_s`` so that a change by
        any process is seen everywhere within that time."""
        validate_queue_name(name)
        now = time.monotonic()
        if not fresh:
            with self._cache_lock:
                cached = self._config_cache.get(name)
            if cached is not None and now - cached[0] < self.settings.config_ttl_s:
                return cached[1]
        try:
            config = self.control.get_queue(name)
        except ShardConnectionFailed as exc:
            # Keep working on the last known config while the control store is away.
            with self._cache_lock:
                stale = self._config_cache.get(name)
            if stale is None:
                raise
            log.warning("control store unreachable, using the cached config of %s: %s", name, exc)
            return stale[1]
        if config is None:
            self._forget_config(name)
            raise QueueNotFound(f"queue {name!r} does not exist (create it first)")
        with self._cache_lock:
            self._config_cache[name] = (now, config)
        return config

    def update_queue(self, name: str, **changes: object) -> QueueConfig:
        """Change a queue's config at run time (rate, pause, claim timeout,
        retry policy, retention); every process sees it within config_ttl_s."""
        current = self.queue_config(name, fresh=True)
        if "priorities" in changes and changes["priorities"] != current.priorities:
            raise InvalidRequest("the number of priorities of an existing queue cannot change")
        try:
            updated = current.with_changes(**changes)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"invalid queue change: {exc}") from None
        self.control.put_queue(updated)
        self._forget_config(name)
        return updated

    def set_rate(self, name: str, jobs_per_second: float | None) -> QueueConfig:
        return self.update_queue(name, max_dequeue_rate=jobs_per_second)

    def pause(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=True)

    def resume(self, name: str) -> QueueConfig:
        return self.update_queue(name, paused=False)

    def _forget_config(self, name: str) -> None:
        with self._cache_lock:
            self._config_cache.pop(name, None)

    def _ensure_queues_on(self, backend: ShardBackend) -> None:
        """A shard that comes back gets storage for queues created while it was down."""
        for config in self.control.list_queues().values():
            backend.create_queue(config.name, config.priorities)

    # -- operator actions ------------------------------------------------------------------
    def retry_failed(
        self,
        queue: str,
        *,
        priority: int | None = None,
        attempts: int = 1,
        run_after_ms: int | None = None,
        limit: int = 1000,
    ) -> int:
        """FAILED -> PENDING with ``attempts`` granted, up to ``limit`` jobs."""
        config = self.queue_config(queue)
        check_attempts(attempts)
        check_limit(limit)
        check_timestamp(run_after_ms)
        priorities = [check_priority(config, priority)] if priority else range(1, config.priorities + 1)
        done = 0
        for backend in self.shards.require_healthy():
            for p in priorities:
                if done < limit:
                    done += self._on_shard(
                        backend, lambda b, p=p, n=limit - done: b.retry_failed(queue, p, attempts, run_after_ms, n)  # type: ignore[misc]
                    )
        self.counters.add(queue, RETRIED_BY_OPERATOR, done)
        return done

    def delete_jobs(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        body_regex: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Deletes up to ``limit`` jobs in ``state`` (optionally only those
        whose body matches ``body_regex``). With a regex, every match is found
        first, within the call's regex budget, and only then deleted: a search
        that hits the budget fails with RegexBudgetExceeded having deleted
        nothing."""
        state = JobState.parse(state)
        config = self.queue_config(queue)
        check_limit(limit)
        search = self._body_search(body_regex)
        priorities = [check_priority(config, priority)] if priority else range(1, config.priorities + 1)
        backends = self.shards.require_healthy()
        if search is not None:
            return self._delete_matching(queue, state, priorities, backends, search, limit)
        done = 0
        for backend in backends:
            for p in priorities:
                if done >= limit:
                    return done
                done += self._on_shard(
                    backend, lambda b, p=p, n=limit - done: b.delete(queue, p, state, None, n)  # type: ignore[misc]
                )
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
                    for r in self._matching_records(
                        backend, queue, p, state, search, wanted, future, what="delete",
                        narrow="nothing was deleted; give a priority, a smaller limit, or a state with fewer jobs")
                ][:wanted]
                if ids:
                    found.append((backend, p, ids))
                    wanted -= len(ids)
        done = 0
        for backend, p, ids in found:
            done += self._on_shard(
                backend, lambda b, p=p, ids=ids: b.delete(queue, p, state, ids, len(ids))  # type: ignore[misc]
            )
        return done

