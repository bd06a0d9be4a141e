"""The job loops that bench/core.py and bench/server.py time, over any
client: the in-process service or the Thrift client."""

from __future__ import annotations

from pinlater import Ack, Job
from pinlater.client_api import PinLaterClient

BODY = b'{"pin_id": 1234567890123, "board_id": 987654321, "action": "fanout"}'


def enqueue_all(client: PinLaterClient, queue: str, jobs: int, batch: int) -> int:
    """Enqueues ``jobs`` jobs of ``BODY`` in calls of ``batch``, a ``Job`` each
    as an application makes them, and as the keyed and unique workloads do:
    one object named n times skipped the 1.2 us a job costs to build here,
    which flattered plain enqueues against theirs."""
    done = 0
    while done < jobs:
        n = min(batch, jobs - done)
        client.enqueue(queue, [Job(BODY) for _ in range(n)])
        done += n
    return done


def enqueue_keyed(client: PinLaterClient, queue: str, jobs: int, batch: int, keys: int, first: int = 0) -> int:
    """As ``enqueue_all``, job i (from ``first``) with fairness key i mod ``keys``."""
    done = 0
    while done < jobs:
        n = min(batch, jobs - done)
        client.enqueue(queue, [Job(BODY, key=f"k{(first + done + i) % keys}") for i in range(n)])
        done += n
    return done


def enqueue_unique(client: PinLaterClient, queue: str, jobs: int, batch: int, first: int = 0) -> int:
    """As ``enqueue_all``, each job with a unique key of its own (from ``first``)."""
    done = 0
    while done < jobs:
        n = min(batch, jobs - done)
        client.enqueue(queue, [Job(BODY, unique=f"u{first}-{done + i}") for i in range(n)])
        done += n
    return done


def drain_all(client: PinLaterClient, queue: str, jobs: int, batch: int) -> int:
    """Dequeues and acknowledges up to ``jobs`` jobs, ``batch`` a call, each
    call's ACKs riding on the next dequeue; returns how many it got."""
    done = 0
    acks: list[Ack] = []
    while done < jobs:
        got = client.dequeue(queue, min(batch, jobs - done), succeeded=acks)
        acks = [Ack(j.descriptor, claim=j.claim) for j in got]
        done += len(got)
        if not got:
            break
    if acks:
        client.ack(queue, succeeded=acks)
    return done
