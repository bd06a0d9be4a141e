"""Read-side operations of the job service: lookup, count, scan.

Body regexes are applied in Python (the same ``re`` semantics on every
backend), by scanning in pages; counts without a regex are answered by the
shards directly.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from pinlater import continuation as cont
from pinlater.backends.base import JobRecord, ShardBackend, ShardUnavailable
from pinlater.descriptor import JobDescriptor
from pinlater.errors import InvalidRequest
from pinlater.models import CONTINUATION_END, JobInfo, ScanResult
from pinlater.states import JobState
from pinlater.validation import check_batch, check_limit, check_priority, compile_body_regex

if TYPE_CHECKING:
    from pinlater.queue_config import QueueConfig
    from pinlater.settings import Settings
    from pinlater.shards import ShardSet

T = TypeVar("T")

# A regex scan reads at most this many jobs per (shard, priority) per call,
# so that a rare pattern cannot turn one request into a full table read.
REGEX_SCAN_BUDGET = 20_000
_PAGE = 500


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
        check_batch(len(descriptors), self.settings.max_jobs_per_call, "descriptors")
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
        total = 0
        for backend in self.shards.require_healthy():
            for p in self._priorities(config, priority):
                if body_regex:
                    total += sum(
                        1 for _ in self._matching_records(backend, queue, p, state, body_regex, None, future)
                    )
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
        regex = compile_body_regex(body_regex)
        sources = [
            (backend, p)
            for backend in self.shards.require_healthy()
            for p in self._priorities(config, priority)
        ]
        streams = [
            self._stream(backend, queue, p, state, future, cont.source_cursor(after, backend.shard_id, p),
                         include_body or regex is not None)
            for backend, p in sources
        ]
        merged = heapq.merge(*streams, key=lambda kr: kr[0], reverse=True)
        jobs: list[JobInfo] = []
        last: cont.ScanKey | None = None
        for examined, (key, shard, record) in enumerate(merged, start=1):
            last = key
            if regex is None or (record.body is not None and regex.search(record.body)):
                info = to_info(queue, shard, record)
                if regex is not None and not include_body:
                    info = replace(info, body=None)
                jobs.append(info)
                if len(jobs) >= limit:
                    break
            if examined >= REGEX_SCAN_BUDGET:
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

    def _matching_records(
        self,
        backend: ShardBackend,
        queue: str,
        priority: int,
        state: JobState,
        body_regex: str,
        limit: int | None,
        future: bool = False,
    ) -> Iterator[JobRecord]:
        regex = compile_body_regex(body_regex)
        if regex is None:
            raise InvalidRequest("empty body regex")
        found = 0
        for _, _, record in self._stream(backend, queue, priority, state, future, None, True):
            if record.body is not None and regex.search(record.body):
                yield record
                found += 1
                if limit is not None and found >= limit:
                    return
