"""Batches in the job service's API (``BatchesMixin``, which ``JobService``
is made of): make, seal, read and cancel a batch, and join the jobs of an
enqueue to one. How a batch ends and releases its callback:
``pinlater.engine.batches``."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pinlater.descriptor import JobDescriptor
from pinlater.engine import batches
from pinlater.errors import EnqueueOutcomeUnknown, InvalidRequest, PinLaterError, StorageError
from pinlater.models import BatchStatus, CancelResult, Enqueued, Job, new_batch_id
from pinlater.stores.base import ShardOutcomeUnknown
from pinlater.stores.control import CANCELLED, LIVE_BATCH_STATES, OPEN
from pinlater.validation import batch_queue, check_batch_id

if TYPE_CHECKING:
    from pinlater.engine.core import Core

log = logging.getLogger(__name__)

# A batch's jobs are cancelled this many a call.
CANCEL_PAGE = 1000


class BatchesMixin:
    core: Core

    # The service's own, which this is mixed into.
    enqueue: Callable[..., Enqueued]
    cancel: Callable[..., CancelResult]
    update_queue: Callable[..., object]

    def create_batch(
        self, callback_queue: str, callback: Job, *, description: str = "", batch: str | None = None
    ) -> str:
        batches.check_callback(callback)
        if not isinstance(description, str) or len(description) > batches.MAX_DESCRIPTION:
            raise InvalidRequest(f"a batch's description is text of at most {batches.MAX_DESCRIPTION} characters")
        batch = new_batch_id(callback_queue) if batch is None else check_batch_id(batch)
        if batch_queue(batch) != callback_queue:
            raise InvalidRequest(f"batch {batch} names the queue {batch_queue(batch)}, not its callback's "
                                 f"{callback_queue}: a batch's id begins with its callback's queue")
        if self.core.control.batch_get(batch) is not None:
            raise InvalidRequest(f"there is a batch {batch} already: choose another id")
        [descriptor] = self.enqueue(callback_queue, [batches.never_due(callback)])
        try:
            created = self.core.control.batch_create(batch, batches.batch_doc(descriptor, description))
        except ShardOutcomeUnknown:
            raise  # the batch may have been made: its callback stays for it
        except PinLaterError:
            # Refused for certain: a callback of no batch would wait, never
            # due, for ever.
            if self._withdraw([descriptor]):
                log.warning("batch %s refused; its callback %s, never due, could not be cancelled", batch, descriptor)
            raise
        if not created:
            self.cancel(callback_queue, [descriptor])
            raise InvalidRequest(f"there is a batch {batch} already: choose another id")
        return batch

    def seal_batch(self, batch: str) -> BatchStatus:
        self.core.batch_ends.flush()  # this process's ACKs first
        record = batches.get_record(self.core, batch)
        if record.state == OPEN and self.core.control.batch_seal(batch):
            batches.release(self.core, batch)
        return batches.status_of(batches.get_record(self.core, batch))

    def batch_status(self, batch: str) -> BatchStatus:
        self.core.batch_ends.flush()  # this process's ACKs first
        return batches.status_of(batches.get_record(self.core, batch))

    def cancel_batch(self, batch: str) -> CancelResult:
        record = batches.get_record(self.core, batch)
        cancelled_now = self.core.control.batch_state(batch, LIVE_BATCH_STATES, CANCELLED)
        result = CancelResult()
        cursor = ""
        while True:
            unended, cursor = self.core.control.batch_unended(batch, CANCEL_PAGE, cursor)
            _merge(result, self._cancel_each_queue([*unended]))
            if not cursor:
                break
        # Also when an earlier call cancelled the batch but not its
        # callback (its shard refused): a cancelled batch never releases it.
        callback = str(record.doc.get("callback", ""))
        if callback and (cancelled_now or record.state == CANCELLED):
            _merge(result, self._cancel_each_queue([callback]))
        # The ends the cancel made, recorded before it answers: the same
        # cancel sent again goes over only the jobs still to end.
        self.core.batch_ends.flush()
        return result

    def _cancel_each_queue(self, descriptors: Sequence[str]) -> CancelResult:
        by_queue: dict[str, list[str]] = defaultdict(list)
        for text in descriptors:
            by_queue[JobDescriptor.parse(text).queue].append(text)
        result = CancelResult()
        limit = self.core.settings.max_jobs_per_call
        for queue, texts in by_queue.items():
            for start in range(0, len(texts), limit):
                part = texts[start:start + limit]
                try:
                    _merge(result, self.cancel(queue, part))
                except PinLaterError as exc:
                    result.unapplied.update(dict.fromkeys(part, str(exc)))
        return result

    def _join(self, queue: str, batch: str, stored: Enqueued) -> None:
        """The jobs an enqueue stored join ``batch`` (a duplicate's holder
        does not: it is another job, maybe of another batch)."""
        duplicates = set(stored.duplicates)
        fresh = [d for i, d in enumerate(stored) if i not in duplicates]
        if not fresh:
            return
        try:
            joined = self.core.control.batch_join(batch, fresh)
        except ShardOutcomeUnknown as exc:
            # As an enqueue whose shard went silent: an idempotency key
            # stays reserved, so a retry with it is refused, not stored twice.
            raise EnqueueOutcomeUnknown(
                f"batch {batch}'s store went silent while {len(fresh)} job(s) enqueued into it joined it: they "
                f"are stored ({_some(fresh)}) and may or may not be in the batch (batch_status tells); sending "
                f"them again would store them twice ({exc})") from exc
        except PinLaterError as exc:
            # Refused for certain: the jobs are withdrawn, so that the call
            # can be sent again whole, as after any refused enqueue.
            left = self._withdraw(fresh)
            if not left:
                raise StorageError(
                    f"batch {batch}'s store refused the {len(fresh)} job(s) enqueued into it, which were "
                    f"cancelled: nothing of the call will run; send it again once the store takes writes "
                    f"({exc})") from exc
            raise StorageError(
                f"batch {batch}'s store refused the {len(fresh)} job(s) enqueued into it ({exc}); the rest were "
                f"cancelled, but {len(left)} had started or could not be reached, outside the batch "
                f"({_some(left)})") from exc
        if not joined:
            # The batch ended between the check and the join. Withdrawn as
            # after a refused join: an idempotency key of the call is freed
            # by the error, and jobs left stored would run twice when the
            # call is sent again (into another batch, say).
            record = self.core.control.batch_get(batch)
            state = record.state if record is not None else "gone"
            left = self._withdraw(fresh)
            if not left:
                raise InvalidRequest(
                    f"batch {batch} became {state} while {len(fresh)} job(s) were enqueued into it: they were "
                    f"cancelled, nothing of the call will run")
            raise InvalidRequest(
                f"batch {batch} became {state} while {len(fresh)} job(s) were enqueued into it; the rest were "
                f"cancelled, but {len(left)} had started or could not be reached, outside the batch ({_some(left)})")

    def _withdraw(self, descriptors: Sequence[str]) -> list[str]:
        """Cancels jobs just stored; those it could not stop before they ran."""
        result = self._cancel_each_queue(descriptors)
        return [*result.interrupted, *result.finished, *result.unknown, *result.unapplied]

    def _batch_before_enqueue(self, queue: str, batch: str) -> None:
        """The batch can take jobs, and the queue tells batches its ends."""
        batches.joinable(batches.get_record(self.core, batch))
        if not self.core.configs.get(queue).batches:
            self.update_queue(queue, batches=True)


def _some(descriptors: Sequence[str]) -> str:
    return f"{', '.join(descriptors[:3])}{'...' if len(descriptors) > 3 else ''}"


def _merge(into: CancelResult, part: CancelResult) -> None:
    into.cancelled += part.cancelled
    into.interrupted += part.interrupted
    into.finished += part.finished
    into.unknown += part.unknown
    into.unapplied.update(part.unapplied)

