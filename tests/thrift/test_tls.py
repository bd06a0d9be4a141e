"""TLS and roles on the Thrift server, over Redis: mutual TLS with the
Python client, each role refused every method outside it (and nothing
changed in the stores), queue grants, plain-TCP clients refused at their
first byte, the loopback rule, and bad certificates."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time
import tracemalloc
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pinlater import Ack, Checkpoint, Job, JobState
from pinlater.errors import ErrorCode, PasswordInvalid, ShardConnectionFailed
from pinlater.kit.tls import TlsConfigError
from pinlater.service import JobService
from pinlater.thrift import STRUCTS, idl
from pinlater.thrift.access import CREATES
from pinlater.thrift.access import ROLES as METHODS_OF
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.pool import ServerPool
from pinlater.thrift.security import Security, check_exposure
from pinlater.thrift.server import ThriftServer
from tests.support.tls import ROLES, Certs, make_certs
from tests.thrift.conftest import make_service
from tests.thrift.hostile_frames import header
from tests.thrift.rawwire import call_frame, ctx, length_prefix, read_reply


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def redis_service(servers: Any) -> Iterator[JobService]:
    svc = make_service("redis")
    yield svc
    svc.close()


@pytest.fixture
def tls_server(redis_service: JobService, certs: Certs, start_server: Callable[..., ThriftServer]) -> ThriftServer:
    return start_server(redis_service, security=Security(certs.server(), certs.roles))


@pytest.fixture
def connect(tls_server: ThriftServer, certs: Certs) -> Iterator[Callable[..., ThriftClient]]:
    made: list[ThriftClient] = []

    def make(identity: str | None = "tls-admin", source: str = "tls-test", **kwargs: Any) -> ThriftClient:
        kwargs.setdefault("retries", 0)
        client = ThriftClient([f"127.0.0.1:{tls_server.port}"], source=source, timeout_s=10,
                              tls=certs.client(identity), **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_job_lifecycle_over_mutual_tls_with_one_role_each(connect: Callable[..., ThriftClient],
                                                            tls_server: ThriftServer, queue_name: str) -> None:
    admin, producer, worker, operator = (connect(f"tls-{r}") for r in ("admin", "producer", "worker", "operator"))
    admin.create_queue(queue_name)
    [descriptor] = producer.enqueue(queue_name, [Job(b"over tls")])
    [job] = worker.dequeue(queue_name, 1)
    assert job.descriptor == descriptor and job.body == b"over tls"
    worker.ack(queue_name, succeeded=[Ack(descriptor)])
    assert operator.count(queue_name, JobState.SUCCEEDED) == 1
    assert producer.lookup([descriptor])[descriptor].state == JobState.SUCCEEDED
    assert _stat(tls_server, "tls_handshakes") >= 4
    assert _stat(tls_server, "calls_denied") == 0


def _stat(server: ThriftServer, counter: str) -> int:
    value: Any = server.stats.snapshot()[counter]
    return int(value)


def _methods(server: ThriftServer) -> dict[str, Any]:
    methods: dict[str, Any] = server.stats.snapshot()["methods"]  # type: ignore[assignment]
    return methods


# -- every role against every method ------------------------------------------------------
def _args(method: str, queue: str, new_queue: str, pending: str, running: str) -> dict[str, Any]:
    """Arguments of a call that would change ``queue`` (or make
    ``new_queue``) if it ran."""
    ack = idl.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor=running)])
    checkpoint = idl.PinLaterCheckpointJobsRequest(
        queueName=queue, requests=[idl.PinLaterCheckpointJobRequest(jobDescriptor=running, moveToPending=True)])
    return {
        "createQueue": {"name": new_queue},
        "deleteQueue": {"name": queue, "password": "secret"},
        "enqueueJobs": {"request": idl.PinLaterEnqueueRequest(queueName=queue, jobs=[idl.PinLaterJob(body=b"x")])},
        "dequeueJobs": {"request": idl.PinLaterDequeueRequest(queueName=queue, limit=10)},
        "ackDequeuedJobs": {"request": ack},
        "ackDequeuedJobsWithResult": {"request": ack},
        "checkpointJobs": {"request": checkpoint},
        "checkpointJobsWithResult": {"request": checkpoint},
        "lookupJobs": {"request": idl.PinLaterLookupJobRequest(jobDescriptors=[pending], includeBody=True)},
        "getJobCount": {"request": idl.PinLaterGetJobCountRequest(queueName=queue, jobState=0)},
        "getQueueNames": {},
        "scanJobs": {"request": idl.PinLaterScanJobsRequest(queueName=queue, jobState=0)},
        "retryFailedJobs": {"request": idl.PinLaterRetryFailedJobsRequest(queueName=queue, limit=10)},
        "deleteJobs": {"request": idl.PinLaterDeleteJobsRequest(queueName=queue, jobState=0, limit=10)},
        "cancelJobs": {"request": idl.PinLaterCancelJobsRequest(queueName=queue, jobDescriptors=[pending, running])},
        "createQueueWithConfig": {"config": idl.PinLaterQueueConfig(name=new_queue)},
        "getQueueConfig": {"name": queue},
        "updateQueueConfig": {"update": idl.PinLaterQueueConfigUpdate(name=queue, paused=True)},
        "createBatch": {
            "request": idl.PinLaterCreateBatchRequest(queueName=queue, callback=idl.PinLaterJob(body=b"c"))},
        "sealBatch": {"batch": f"{queue}.b" + "0" * 24},
        "getBatch": {"batch": f"{queue}.b" + "0" * 24},
        "cancelBatch": {"batch": f"{queue}.b" + "0" * 24},
    }[method]


def _refused(identity: str, roles: list[str], method: str) -> bool:
    """Whether ``identity`` may not call ``method`` on the test's queue."""
    if not any(method in METHODS_OF[role] for role in roles):
        return True
    if method == "getQueueNames":  # names no queue: answered, only the granted ones
        return False
    if identity == "tls-team-a":  # granted only its team's queues
        return True
    return method in CREATES and "admin" not in roles  # the test's new queue does not exist


def _raw_call(pool: ServerPool, method: str, source: str, kwargs: dict[str, Any]) -> Any:
    args_cls, result_cls = STRUCTS[method]
    args = args_cls(context=idl.RequestContext(source=source), **kwargs)
    return pool.call(method, args, result_cls())


def _snapshot(service: JobService, queue: str, descriptors: list[str]) -> Any:
    """What the stores hold of ``queue``: every job, the counts, its config."""
    jobs = service.lookup(descriptors, include_body=True)
    counts = {state: service.count(queue, state) + service.count(queue, state, future=True) for state in JobState}
    return jobs, counts, service.queue_config(queue, fresh=True), queue in service.queue_names()


def test_each_role_is_refused_every_method_outside_it_and_nothing_changes(
    tls_server: ThriftServer, redis_service: JobService, certs: Certs, queue_name: str
) -> None:
    service = redis_service
    service.create_queue(queue_name)
    pending, running, failed = service.enqueue(queue_name, [Job(b"p"), Job(b"r"), Job(b"f", attempts_allowed=1)])
    claimed = {j.descriptor for j in service.dequeue(queue_name, 3, source="tls-test")}
    assert claimed == {pending, running, failed}
    service.ack(queue_name, failed=[Ack(failed)], source="tls-test")
    # Back to PENDING without spending an attempt.
    service.checkpoint(queue_name, [Checkpoint(pending, move_to_pending=True)], source="tls-test")
    before = _snapshot(service, queue_name, [pending, running, failed])
    new_queue = f"t_{uuid.uuid4().hex[:12]}"
    refused = 0
    for identity, line in ROLES.items():
        roles = line.split()[0].split(",")
        pool = ServerPool([f"127.0.0.1:{tls_server.port}"], tls=certs.client(identity).context())
        try:
            for method in STRUCTS:
                if not _refused(identity, roles, method):
                    continue
                result = _raw_call(pool, method, "tls-test", _args(method, queue_name, new_queue, pending, running))
                assert result.e is not None, (identity, method)
                assert result.e.errorCode == ErrorCode.PASSWORD_INVALID, (identity, method, result.e.message)
                assert identity in result.e.message and method in result.e.message
                refused += 1
        finally:
            pool.close()
    assert _snapshot(service, queue_name, [pending, running, failed]) == before
    assert new_queue not in service.queue_names()
    # Every method is refused to someone but admin, and admin to nobody.
    assert refused >= sum(len(STRUCTS) - len(METHODS_OF[r]) for r in ("producer", "worker", "operator"))
    assert _stat(tls_server, "calls_denied") == refused
    errors = _methods(tls_server)
    assert sum(m["errors"] for m in errors.values()) == refused


def test_each_role_may_call_its_own_methods(connect: Callable[..., ThriftClient], tls_server: ThriftServer,
                                            certs: Certs, queue_name: str) -> None:
    admin = connect("tls-admin")
    admin.create_queue(queue_name)
    for role in ("producer", "worker", "operator", "admin"):
        pool = ServerPool([f"127.0.0.1:{tls_server.port}"], tls=certs.client(f"tls-{role}").context())
        try:
            [descriptor] = admin.enqueue(queue_name, [Job(b"x")])
            for method in sorted(METHODS_OF[role], key=lambda m: m == "deleteQueue"):
                result = _raw_call(pool, method, "tls-test",
                                   _args(method, queue_name, queue_name, descriptor, descriptor))
                code = result.e.errorCode if result.e is not None else None
                assert code != ErrorCode.PASSWORD_INVALID or (method == "deleteQueue" and "secret" in str(
                    result.e.message)), (role, method, result.e and result.e.message)
        finally:
            pool.close()
    assert _stat(tls_server, "calls_denied") == 0


@pytest.mark.parametrize("identity, method", [
    ("tls-producer", "deleteJobs"), ("tls-operator", "enqueueJobs"), ("stranger", "getQueueNames"),
])
def test_a_call_outside_the_role_is_refused_from_its_header_alone(
        tls_server: ThriftServer, certs: Certs, identity: str, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments that no walk or decoder would accept, as large as a frame
    may be: refused with PASSWORD_INVALID from the message header, at a
    cost that does not depend on them (on the wire, drained as they arrive:
    never buffered whole nor counted against the buffer budget), and the
    connection stays open."""
    reserved: list[int] = []
    reserve = tls_server.budget.reserve

    def counting(holder: Any, size: int, deadline: float) -> bool:
        reserved.append(size)
        return reserve(holder, size, deadline)

    monkeypatch.setattr(tls_server.budget, "reserve", counting)
    body = header(method) + b"\xff" * (tls_server.max_frame - 100)
    tracemalloc.start()
    try:
        started = time.thread_time()
        reply, keep = tls_server.handle(body, (identity,))
        cpu = time.thread_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert keep and reply is not None and peak < 64 * 1024 and cpu < 0.05, (peak, cpu)
    context = certs.client(identity).context()
    with (socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as raw,
          context.wrap_socket(raw, server_hostname="127.0.0.1") as sock):
        sock.sendall(length_prefix(len(body)) + body)
        result = read_reply(sock, method, timeout_s=20)
        assert result.e.errorCode == ErrorCode.PASSWORD_INVALID, result.e.message
        assert identity in result.e.message
        sock.sendall(call_frame("getQueueConfig", seqid=2, context=ctx(), name="no_such_queue"))
        assert read_reply(sock, "getQueueConfig").e is not None  # answered: the connection is in step
    assert tls_server.stats.bad_frames == 0 and reserved == []
    # The call, in process and on the wire; a stranger's getQueueConfig too.
    assert _stat(tls_server, "calls_denied") == 2 + (identity == "stranger")


def test_queue_grants_narrow_a_role(connect: Callable[..., ThriftClient], tls_server: ThriftServer) -> None:
    ours, theirs = f"tls_team_a_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:12]}"
    admin, team = connect("tls-admin"), connect("tls-team-a")
    admin.create_queue(ours)
    admin.create_queue(theirs)
    [descriptor] = team.enqueue(ours, [Job(b"ours")])
    assert team.lookup([descriptor])[descriptor].state == JobState.PENDING
    with pytest.raises(PasswordInvalid, match=f"may not call enqueueJobs on queue '{theirs}'"):
        team.enqueue(theirs, [Job(b"theirs")])
    names = team.queue_names()
    assert ours in names and theirs not in names
    assert admin.count(theirs, JobState.PENDING) == 0
    # Declaring an existing queue is allowed (it changes nothing); making one is not.
    assert team.create_queue(ours).name == ours
    with pytest.raises(PasswordInvalid, match="only the admin role creates queues"):
        team.create_queue(f"tls_team_a_{uuid.uuid4().hex[:8]}")


def test_a_certificate_the_roles_file_does_not_list_is_refused_every_call(
        connect: Callable[..., ThriftClient]) -> None:
    stranger = connect("stranger")
    with pytest.raises(PasswordInvalid, match="'stranger' has no role on this server"):
        stranger.queue_names()


@pytest.mark.parametrize("identity, problem", [
    (None, "no client certificate"), ("expired", "an expired certificate"), ("other-ca", "another CA's certificate"),
])
def test_bad_client_certificates_are_refused_at_the_handshake(
        connect: Callable[..., ThriftClient], tls_server: ThriftServer, identity: str | None, problem: str) -> None:
    before = _stat(tls_server, "tls_handshake_failures")
    client = connect(identity)
    with pytest.raises(ShardConnectionFailed, match=r"TLS|SSL|certificate"):
        client.queue_names()
    # The server counts it once its side of the handshake has failed too.
    deadline = time.monotonic() + 5
    while _stat(tls_server, "tls_handshake_failures") == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stat(tls_server, "tls_handshake_failures") > before, problem
    assert sum(m["requests"] for m in _methods(tls_server).values()) == 0


def test_the_client_verifies_the_servers_certificate(
        tls_server: ThriftServer, certs: Certs, tmp_path: Path) -> None:
    """The client verifies the server: a client trusting another CA refuses
    this server's certificate before sending anything."""
    other = make_certs(tmp_path / "other")
    client = ThriftClient([f"127.0.0.1:{tls_server.port}"], source="x", retries=0, tls=other.client("tls-admin"))
    try:
        with pytest.raises(ShardConnectionFailed, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            client.queue_names()
    finally:
        client.close()
    assert sum(m["requests"] for m in _methods(tls_server).values()) == 0


def test_a_plain_client_is_closed_at_its_first_byte_and_counted(
        connect: Callable[..., ThriftClient], tls_server: ThriftServer) -> None:
    plain = ThriftClient([f"127.0.0.1:{tls_server.port}"], source="plain", retries=0, timeout_s=5)
    try:
        started = time.monotonic()
        with pytest.raises(ShardConnectionFailed):
            plain.queue_names()
        assert time.monotonic() - started < 2
    finally:
        plain.close()
    assert _stat(tls_server, "tls_plaintext_refused") == 1
    assert _stat(tls_server, "tls_handshakes") == 0
    assert isinstance(connect("tls-admin").queue_names(), set)  # the port still serves TLS
    assert "pinlater_server_tls_plaintext_refused 1" in tls_server.stats.prometheus()


def test_tls_12_is_the_oldest_version_accepted(tls_server: ThriftServer, certs: Certs) -> None:
    assert tls_server.tls_context is not None
    assert tls_server.tls_context.minimum_version == ssl.TLSVersion.TLSv1_2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # asking for TLS 1.1 is the point
        context = certs.client("tls-admin").context()
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="127.0.0.1")
    context = certs.client("tls-admin").context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with (socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as raw,
          context.wrap_socket(raw, server_hostname="127.0.0.1") as tls):
        assert tls.version() == "TLSv1.2"


def test_plain_tcp_off_the_loopback_is_refused_unless_insecure(redis_service: JobService, certs: Certs) -> None:
    with pytest.raises(TlsConfigError, match=r"refusing to serve plain TCP on 0\.0\.0\.0.*PINLATER_SERVER_INSECURE"):
        ThriftServer(redis_service, "0.0.0.0", 0, metrics_port=None)
    insecure = JobService(redis_service.core.sibling(_replace(redis_service, server_insecure=True)),
                          source="insecure")
    ThriftServer(insecure, "0.0.0.0", 0, metrics_port=None).stop(0)
    # With TLS any address may be bound.
    ThriftServer(redis_service, "0.0.0.0", 0, metrics_port=None,
                 security=Security(certs.server(), certs.roles)).stop(0)


def test_tls_without_client_certificates_off_the_loopback_is_refused_unless_insecure(
        redis_service: JobService, certs: Certs) -> None:
    """With TLS but no client CA anyone who reaches the port may call every
    method but deleteQueue, and guess the admin secret: not safe to expose."""
    server_only = Security(certs.server(client_certs=False, roles=False))
    for host in ("0.0.0.0", "::", ""):
        with pytest.raises(TlsConfigError, match="refusing to serve TLS without client certificates") as info:
            check_exposure(host, server_only, insecure=False)
        message = str(info.value)
        assert "\n" not in message and "PINLATER_SERVER_TLS_CLIENT_CA" in message
        assert "PINLATER_SERVER_INSECURE" in message
    with pytest.raises(TlsConfigError, match=r"without client certificates on 0\.0\.0\.0"):
        ThriftServer(redis_service, "0.0.0.0", 0, metrics_port=None, security=server_only)
    # Loopback needs nothing; elsewhere the explicit setting lets it listen.
    for host in ("127.0.0.1", "::1", "localhost"):
        check_exposure(host, server_only, insecure=False)
    ThriftServer(redis_service, "127.0.0.1", 0, metrics_port=None, security=server_only).stop(0)
    insecure = JobService(redis_service.core.sibling(_replace(redis_service, server_insecure=True)),
                          source="insecure")
    ThriftServer(insecure, "0.0.0.0", 0, metrics_port=None, security=server_only).stop(0)
    # Client certificates without roles are enough.
    check_exposure("0.0.0.0", Security(certs.server(roles=False)), insecure=False)


def _replace(service: JobService, **changes: Any) -> Any:
    return dataclasses.replace(service.settings, **changes)
