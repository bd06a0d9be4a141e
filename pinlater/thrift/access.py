"""Roles of the Thrift server's callers: which methods a client certificate's
identity may call, and on which queues.

The roles file (``PINLATER_SERVER_ROLES``) has one line per identity::

    # identity            role[,role]   [queue ...]
    feeds-web             producer      feed_* fanout_pin
    celery-feeds          worker        feed_* fanout_pin
    oncall                operator
    deploy                admin

The identity is a client certificate's subject CN, or one of its SAN's DNS,
URI or email names (``pinlater.kit.tls.peer_names``), without white space. The
queues narrow the roles to those queues (a trailing ``*`` matches any rest);
none means every queue.

Roles and their methods (``ROLES``): ``producer`` enqueues and looks up
jobs; ``worker`` is a producer (tasks enqueue follow-on jobs) that also
dequeues, ACKs, checkpoints and counts (Kombu counts a queue when a worker
declares it); ``operator`` counts, scans, retries, deletes jobs and changes
rates and pauses; ``admin`` may call everything. Every role reads queue
configs and names (a narrowed role sees only its queues' names), and may
"create" a queue that already exists, which changes nothing and is how
workers and producers declare the queues they use; creating a new queue
and deleting one (with the admin secret too) take ``admin``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinlater.errors import PasswordInvalid, QueueNotFound
from pinlater.thrift import STRUCTS
from pinlater.thrift.convert import text
from pinlater.validation import batch_queue

_READ_CONFIG = frozenset({"getQueueConfig", "getQueueNames"})
CREATES = frozenset({"createQueue", "createQueueWithConfig"})
# A batch belongs to its callback's queue, which its id names: who may
# enqueue may make, seal and read batches; cancelling one is an operator's.
_BATCHES = frozenset({"createBatch", "sealBatch", "getBatch"})
_PRODUCER = frozenset({"enqueueJobs", "lookupJobs"}) | _READ_CONFIG | CREATES | _BATCHES
ROLES: dict[str, frozenset[str]] = {
    "producer": _PRODUCER,
    "worker": _PRODUCER | {"dequeueJobs", "ackDequeuedJobs", "ackDequeuedJobsWithResult", "checkpointJobs",
                           "checkpointJobsWithResult", "getJobCount"},
    "operator": _READ_CONFIG | CREATES | {"getJobCount", "scanJobs", "lookupJobs", "retryFailedJobs", "deleteJobs",
                                          "updateQueueConfig", "cancelJobs", "cancelBatch", "getBatch"},
    "admin": frozenset(STRUCTS),
}
_IDENTITY = re.compile(r"[^\s#]+")
_QUEUE_PATTERN = re.compile(r"[A-Za-z0-9_]+\*?|\*")


class RolesFileError(ValueError):
    """The roles file cannot be used; one line naming the file and line."""


class AccessDenied(PasswordInvalid):
    """A call outside the caller's role (the wire's PASSWORD_INVALID)."""


@dataclass(frozen=True, slots=True)
class Grant:
    identity: str
    roles: frozenset[str]
    # None: every queue.
    queues: tuple[str, ...] | None = None
    # The server's roles and their methods: the job service's, or another
    # service's on the same kit (an app's Thrift service).
    table: Mapping[str, frozenset[str]] = field(default_factory=lambda: ROLES, compare=False, repr=False)

    def may_call(self, method: str) -> bool:
        return any(method in self.table[role] for role in self.roles)

    def may_touch(self, queue: str) -> bool:
        if self.queues is None:
            return True
        return any(queue.startswith(p[:-1]) if p.endswith("*") else queue == p for p in self.queues)

    @property
    def creates_queues(self) -> bool:
        return "admin" in self.roles

    def describe(self) -> str:
        where = f" on {' '.join(self.queues)}" if self.queues is not None else ""
        return f"{self.identity!r} ({','.join(sorted(self.roles))}{where})"


class AccessList:
    """The identities of a roles file and their grants."""

    def __init__(self, grants: Iterable[Grant] = ()) -> None:
        self.grants = {g.identity: g for g in grants}

    @classmethod
    def parse(cls, content: str, where: str = "roles", table: Mapping[str, frozenset[str]] = ROLES) -> AccessList:
        """``table``: the roles a line may name, and their methods."""
        grants: dict[str, Grant] = {}
        for number, raw in enumerate(content.splitlines(), 1):
            line = raw.split("#", 1)[0].split()
            if not line:
                continue
            at = f"{where}:{number}"
            if len(line) < 2:
                raise RolesFileError(f"{at}: expected '<identity> <role> [queue ...]', got one word")
            identity, role_text, queues = line[0], line[1], line[2:]
            if identity in grants:
                raise RolesFileError(f"{at}: {identity!r} is listed twice; give it one line")
            roles = frozenset(role_text.split(","))
            unknown = sorted(roles - set(table))
            if unknown or "" in roles:
                raise RolesFileError(f"{at}: unknown role {(unknown or [''])[0]!r}; roles are {', '.join(table)}")
            for queue in queues:
                if not _QUEUE_PATTERN.fullmatch(queue):
                    raise RolesFileError(f"{at}: {queue[:60]!r} is not a queue name or a prefix ending in *")
            grants[identity] = Grant(identity, roles, None if not queues or "*" in queues else tuple(queues), table)
        return cls(grants.values())

    @classmethod
    def load(cls, path: str, table: Mapping[str, frozenset[str]] = ROLES) -> AccessList:
        try:
            content = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RolesFileError(f"cannot read the roles file {path}: {exc}") from None
        return cls.parse(content, path, table)

    def grant_for(self, names: Iterable[str]) -> Grant | None:
        """The grant of the first of a certificate's names that is listed."""
        for name in names:
            grant = self.grants.get(name)
            if grant is not None:
                return grant
        return None


def queues_named(method: str, args: Any) -> list[str]:
    """The queues a decoded call names (a lookup: its descriptors' queues)."""
    given = args.__dict__
    if "name" in given:
        return [text(given["name"]) or ""]
    holder = given.get("config") or given.get("update")
    if holder is not None:
        return [text(holder.name) or ""]
    if "batch" in given:  # a batch belongs to its callback's queue, which its id names
        return [batch_queue(text(given["batch"]) or "")]
    request = given.get("request")
    if request is None:
        return []
    if method == "lookupJobs":
        return [(text(d) or "").split(":", 1)[0] for d in request.jobDescriptors or ()]
    names = [text(request.queueName) or ""]
    batch = getattr(request, "batch", None)
    if batch and method == "enqueueJobs":
        names.append(batch_queue(text(batch) or ""))
    ack = getattr(request, "jobAckRequest", None)
    if ack is not None and (ack.jobsSucceeded or ack.jobsFailed):
        names.append(text(ack.queueName) or "")
    return names


def check_method(grant: Grant | None, names: tuple[str, ...], method: str) -> Grant:
    """Raises AccessDenied unless ``grant`` may call ``method`` at all: from
    the message header, before its arguments are decoded."""
    if grant is None:
        who = repr(names[0]) if names else "a client without a certificate name"
        raise AccessDenied(f"{who} has no role on this server")
    if not grant.may_call(method):
        raise AccessDenied(f"{grant.describe()} may not call {method}")
    return grant


def check(grant: Grant | None, names: tuple[str, ...], method: str, args: Any,
          exists: Callable[[str], bool]) -> None:
    """Raises AccessDenied unless ``grant`` allows this call; ``exists``
    says whether a queue exists (a non-admin "creates" only those)."""
    check_queues(check_method(grant, names, method), method, args, exists)


def check_queues(grant: Grant, method: str, args: Any, exists: Callable[[str], bool]) -> None:
    """The queues part of ``check``, for a grant that may call ``method``."""
    for queue in queues_named(method, args):
        if not grant.may_touch(queue):
            raise AccessDenied(f"{grant.describe()} may not call {method} on queue {queue[:60]!r}")
    if method in CREATES and not grant.creates_queues:
        for queue in queues_named(method, args):
            try:
                found = exists(queue)
            except QueueNotFound:
                found = False
            if not found:
                raise AccessDenied(f"{grant.describe()} may not call {method} on queue {queue[:60]!r}: it does "
                                   "not exist, and only the admin role creates queues")
