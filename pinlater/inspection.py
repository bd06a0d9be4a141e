"""Read-side operations of the job service: lookup, count, scan.

Body regexes are applied by the service (RE2 syntax and semantics on every
backend, linear time in a body's length), by scanning in pages; counts
without a regex are answered by the shards directly. One body-regex call
examines at most ``regex_max_bodies`` bodies and runs at most
``regex_budget_s`` seconds (see ``BodySearch``): a count or delete past
either fails with RegexBudgetExceeded, a scan returns the page so far and a
continuation.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from pinlater import continuation as cont
from pinlater.backends.base import JobRecord, ShardBackend, ShardUnavailable
from pinlater.descriptor import JobDescriptor
from pinlater.errors import RegexBudgetExceeded
from pinlater.models import CONTINUATION_END, JobInfo, ScanResult
from pinlater.states import JobState
from pinlater.validation import MAX_LIMIT, BodyRegex, check_batch, check_limit, check_priority, compile_body_regex

if TYPE_CHECKING:
    from pinlater.queue_config import QueueConfig
    from pinlater.settings import Settings
    from pinlater.shards import ShardSet

T = TypeVar("T")

# A regex scan examines at most this many jobs per call (fewer if
# regex_max_bodies is lower), then returns its page so far and a
# continuation, so that a rare pattern cannot turn one request into a full
# table read.
REGEX_SCAN_BUDGET = 20_000
_PAGE = 500


class BodySearch:
    """One call's body regex and the work it may still do: bodies examined
    (``max_bodies``) and wall time from the start of the call (``budget_s``,
    reading pages from the shards included)."""

    def __init__(self, pattern: str, regex: BodyRegex, max_bodies: int, budget_s: float) -> None:
        self.pattern = pattern
        self.regex = regex
        self.max_bodies = max_bodies
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        self.examined = 0

    def bound_hit(self) -> str | None:
        """Which bound, if any, stops the search from examining another body."""
        if self.examined >= self.max_bodies:
            return f"examined {self.examined} bodies, the most one call may (PINLATER_REGEX_MAX_BODIES)"
        if time.monotonic() >= self.deadline:
            return (f"ran {self.budget_s:g} s, the longest one call may (PINLATER_REGEX_BUDGET_S), "
                    f"after {self.examined} bodies")
        return None

    def check(self, what: str, narrow: str) -> None:
        """Before examining another body: fail clearly if a bound is hit."""
        hit = self.bound_hit()
        if hit is not None:
            raise RegexBudgetExceeded(f"{what} with body regex {self.pattern!r} stopped: it {hit}; {narrow}")

    def matches(self, body: bytes | None) -> bool:
        self.examined += 1
        return body is not None and self.regex.search(body) is not None


def to_info(queue: str, shard: str, record: JobRecord) -> JobInfo:
    return JobInfo(
        descriptor=str(JobDescriptor(queue, shard, record.priority, record.local_id)),
        state=record.state,
        attempts_allowed=record.attempts_allowed,
        attempts_remaining=record.attempts_remaining,
        custom_status=record.custom_status,
        created_at_ms=record.created_at_ms,
        run_after_ms=record.run_after_ms,
        updated_at_ms=record.updated_at_ms,
        claim=record.claim,
        body=record.body,
    )


class InspectionMixin:
    shards: ShardSet
    settings: Settings

    if TYPE_CHECKING:

        def queue_config(self, name: str, *, fresh: bool = False) -> QueueConfig:
            raise NotImplementedError

        def _on_shard(self, backend: ShardBackend, fn: Callable[[ShardBackend], T]) -> T:
            raise NotImplementedError

    def _priorities(self, config: QueueConfig, priority: int | None) -> list[int]:
        if priority:
            return [check_priority(config, priority)]
        return list(range(1, config.priorities + 1))

    # -- lookup ----------------------------------------------------------------
    def lookup(self, descriptors: Sequence[str], *, include_body: bool = False) -> dict[str, JobInfo]:
        """Jobs by descriptor; unknown descriptors (and queues) are left out."""
        check_batch(len(descriptors), MAX_LIMIT, "descriptors")
        groups: dict[tuple[str, str, int], list[JobDescriptor]] = defaultdict(list)
        for text in descriptors:
            d = JobDescriptor.parse(text)
            self.shards.get(d.shard)
            groups[(d.shard, d.queue, d.priority)].append(d)
        found: dict[str, JobInfo] = {}
        for (shard, queue, priority), ds in groups.items():
            backend = self.shards.get(shard)
            ids = [d.local_id for d in ds]
            records = self._on_shard(backend, lambda b: b.lookup(queue, priority, ids, include_body))  # noqa: B023
            for d, record in zip(ds, records, strict=True):
                if record is not None:
                    found[str(d)] = to_info(queue, shard, record)
        return found

    # -- count -----------------------------------------------------------------
    def count(
        self,
        queue: str,
        state: JobState | str | int,
        *,
        priority: int | None = None,
        future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        """Jobs in ``state`` over every healthy shard. For PENDING, ``future``
        picks jobs whose run_after is still ahead instead of runnable ones."""
        state = JobState.parse(state)
        config = self.queue_config(queue)
        search = self._body_search(body_regex)
        priorities = self._priorities(config, priority)
        total = 0
        for backend in self.shards.require_healthy():
            for p in priorities:
                if search is not None:
                    total += sum(1 for _ in self._matching_records(
                        backend, queue, p, state, search, None, future, what="count",
                        narrow="give a priority, a state with fewer jobs, or count without a regex"))
                else:
                    total += self._on_shard(backend, lambda b, p=p: b.count(queue, p, state, future))  # type: ignore[misc]
        return total

    def count_by_shard(self, queue: str) -> dict[str, dict[str, int]]:
        """Per shard: jobs by state (pending split into now and future), for
        dashboards. A shard that is down reports nothing."""
        config = self.queue_config(queue)
        out: dict[str, dict[str, int]] = {}
        for backend in self.shards.healthy():
            counts: dict[str, int] = defaultdict(int)
            try:
                for p in range(1, config.priorities + 1):
                    for state in JobState:
                        counts[state.name.lower()] += self._on_shard(
                            backend, lambda b, p=p, s=state: b.count(queue, p, s, False)  # type: ignore[misc]
                        )
                    counts["pending_future"] += self._on_shard(
                        backend, lambda b, p=p: b.count(queue, p, JobState.PENDING, True)  # type: ignore[misc]
                    )
            except ShardUnavailable:
                continue
            out[backend.shard_id] = dict(counts)
        return out

    # -- scan ------------------------------------------------------------------
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
    ) -> ScanResult:
        """Jobs in ``state``, newest first (run_after for PENDING, last update
        otherwise), one page at a time; pass the returned continuation to get
        the next page, until it is CONTINUATION_END."""
        state = JobState.parse(state)
        config = self.queue_config(queue)
        check_limit(limit)
        after = cont.decode(continuation)
        # With a regex, a page ends early (with a continuation) once it has
        # examined its share of bodies or used its time budget.
        search = self._body_search(body_regex, max_bodies=REGEX_SCAN_BUDGET)
        sources = [
            (backend, p)
            for backend in self.shards.require_healthy()
            for p in self._priorities(config, priority)
        ]
        streams = [
            self._stream(backend, queue, p, state, future, cont.source_cursor(after, backend.shard_id, p),
                         include_body or search is not None)
            for backend, p in sources
        ]
        merged = heapq.merge(*streams, key=lambda kr: kr[0], reverse=True)
        jobs: list[JobInfo] = []
        last: cont.ScanKey | None = None
        for key, shard, record in merged:
            last = key
            if search is None or search.matches(record.body):
                info = to_info(queue, shard, record)
                if search is not None and not include_body:
                    info = replace(info, body=None)
                jobs.append(info)
                if len(jobs) >= limit:
                    break
            if search is not None and search.bound_hit() is not None:
                break
        else:
            return ScanResult(jobs, CONTINUATION_END)
        assert last is not None
        return ScanResult(jobs, last.encode())

    def _stream(
        self,
        backend: ShardBackend,
        queue: str,
        priority: int,
        state: JobState,
        future: bool,
        before: tuple[int, int] | None,
        include_body: bool,
    ) -> Iterator[tuple[cont.ScanKey, str, JobRecord]]:
        """One (shard, priority) source in scan order, fetched page by page."""
        while True:
            page = self._on_shard(
                backend, lambda b: b.scan(queue, priority, state, future, before, _PAGE, include_body)  # noqa: B023
            )
            for record in page:
                key = cont.ScanKey(record.sort_time_ms, backend.shard_id, priority, record.local_id)
                yield key, backend.shard_id, record
            if len(page) < _PAGE:
                return
            before = (page[-1].sort_time_ms, page[-1].local_id)

    def _body_search(self, body_regex: str | None, max_bodies: int | None = None) -> BodySearch | None:
        """The call's regex and budget (None without a regex); a bad pattern
        fails here, before any shard is read."""
        regex = compile_body_regex(body_regex)
        if regex is None or body_regex is None:
            return None
        bodies = self.settings.regex_max_bodies
        if max_bodies is not None:
            bodies = min(bodies, max_bodies)
        return BodySearch(body_regex, regex, bodies, self.settings.regex_budget_s)

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
        """Records whose body matches, up to ``limit``; RegexBudgetExceeded
        (saying ``what`` stopped and how to ``narrow`` it) once the search
        would examine a body past its budget."""
        found = 0
        for _, _, record in self._stream(backend, queue, priority, state, future, None, True):
            search.check(what, narrow)
            if search.matches(record.body):
                yield record
                found += 1
                if limit is not None and found >= limit:
                    return
