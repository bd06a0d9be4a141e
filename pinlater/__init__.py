"""PinLater-py: a PinLater-style asynchronous job service.

    from pinlater import connect, Job
    client = connect()                       # settings from PINLATER_* variables
    client.create_queue("emails")
    [d] = client.enqueue("emails", [Job(b'{"to": 42}')])
    jobs = client.dequeue("emails", limit=10)
    client.ack("emails", succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs])
"""

from pinlater.errors import ErrorCode, PinLaterError
from pinlater.models import (
    CANCELLED_STATUS,
    CONTINUATION_END,
    CONTINUATION_START,
    Ack,
    AckResult,
    BatchStatus,
    CancelResult,
    Checkpoint,
    DequeuedJob,
    Enqueued,
    Job,
    JobInfo,
    ScanResult,
)
from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy
from pinlater.service import JobService, connect
from pinlater.settings import Settings, ShardSpec
from pinlater.states import JobState

__all__ = [
    "CANCELLED_STATUS",
    "CONTINUATION_END",
    "CONTINUATION_START",
    "Ack",
    "AckResult",
    "BatchStatus",
    "CancelResult",
    "Checkpoint",
    "DequeuedJob",
    "Enqueued",
    "ErrorCode",
    "Job",
    "JobInfo",
    "JobService",
    "JobState",
    "PinLaterError",
    "QueueConfig",
    "RetryPolicy",
    "ScanResult",
    "Settings",
    "ShardSpec",
    "connect",
]
