"""The roles file and the decisions of ``pinlater.thrift.access``, without
a server: parsing and its one-line errors, grants by certificate name,
queue grants and prefixes, and which calls each role may make."""

from __future__ import annotations

from typing import Any

import pytest

from pinlater.errors import QueueNotFound
from pinlater.settings import SettingError, Settings
from pinlater.thrift import STRUCTS, idl
from pinlater.thrift.access import ROLES, AccessDenied, AccessList, Grant, RolesFileError, check, queues_named


def _args(method: str, **kwargs: Any) -> Any:
    return STRUCTS[method][0](context=idl.RequestContext(source="s"), **kwargs)


def test_a_roles_file_with_comments_roles_and_queue_grants() -> None:
    roles = AccessList.parse("""
        # identity   role            queues
        web          producer        feed_* fanout_pin   # the web tier
        celery       worker,operator
        spiffe://example.org/deploy admin *
    """)
    web = roles.grants["web"]
    assert web.roles == {"producer"} and web.queues == ("feed_*", "fanout_pin")
    assert web.may_touch("feed_write") and web.may_touch("fanout_pin") and not web.may_touch("fanout_pins")
    assert roles.grants["celery"].roles == {"worker", "operator"} and roles.grants["celery"].queues is None
    assert roles.grants["spiffe://example.org/deploy"].queues is None  # "*": every queue
    # The CN first, then the SAN's names.
    assert roles.grant_for(("nobody", "web")) is web
    assert roles.grant_for(("nobody",)) is None


@pytest.mark.parametrize("content, problem", [
    ("web\n", "roles:1: expected '<identity> <role> [queue ...]', got one word"),
    ("web producer\nweb worker\n", "roles:2: 'web' is listed twice"),
    ("web producers\n", "roles:1: unknown role 'producers'"),
    ("web producer,\n", "roles:1: unknown role ''"),
    ("web producer feed-x\n", "roles:1: 'feed-x' is not a queue name or a prefix ending in *"),
    ("web producer fe*ed\n", "roles:1: 'fe*ed' is not a queue name"),
])
def test_a_bad_roles_file_is_refused_naming_the_line(content: str, problem: str) -> None:
    with pytest.raises(RolesFileError) as refused:
        AccessList.parse(content)
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_an_unreadable_roles_file_is_one_line(tmp_path: Any) -> None:
    with pytest.raises(RolesFileError, match=r"cannot read the roles file .*missing"):
        AccessList.load(str(tmp_path / "missing"))


def test_what_each_role_may_call() -> None:
    assert ROLES["admin"] == frozenset(STRUCTS)
    for role in ("producer", "worker", "operator"):
        assert not ROLES[role] & {"deleteQueue"}
    assert {"enqueueJobs", "lookupJobs"} <= ROLES["producer"]
    assert {"dequeueJobs", "ackDequeuedJobs", "checkpointJobs", "getQueueConfig"} <= ROLES["worker"]
    assert {"getJobCount", "scanJobs", "retryFailedJobs", "deleteJobs", "updateQueueConfig"} <= ROLES["operator"]
    assert "enqueueJobs" not in ROLES["operator"] and "dequeueJobs" not in ROLES["producer"]


def test_queues_named_by_each_kind_of_call() -> None:
    ack = idl.PinLaterJobAckRequest(queueName="b", jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor="b:s1:p1:1")])
    dequeue = idl.PinLaterDequeueRequest(queueName="a", limit=1, jobAckRequest=ack)
    assert queues_named("dequeueJobs", _args("dequeueJobs", request=dequeue)) == ["a", "b"]
    lookup = idl.PinLaterLookupJobRequest(jobDescriptors=["x:s1:p1:1", "y:s2:p1:2"])
    assert queues_named("lookupJobs", _args("lookupJobs", request=lookup)) == ["x", "y"]
    assert queues_named("createQueue", _args("createQueue", name="q")) == ["q"]
    update = idl.PinLaterQueueConfigUpdate(name="u", paused=True)
    assert queues_named("updateQueueConfig", _args("updateQueueConfig", update=update)) == ["u"]
    assert queues_named("getQueueNames", _args("getQueueNames")) == []
    # A batch is its callback's queue's, as its id says: reading, sealing or
    # cancelling it touches that queue, and so does enqueueing into it.
    batch = "reports.b" + "0" * 24
    for method in ("getBatch", "sealBatch", "cancelBatch"):
        assert queues_named(method, _args(method, batch=batch)) == ["reports"]
    into = idl.PinLaterBatchEnqueueRequest(queueName="sync", jobs=[], batch=batch)
    assert queues_named("enqueueJobs", _args("enqueueJobs", request=into)) == ["sync", "reports"]
    made = idl.PinLaterCreateBatchRequest(queueName="reports", callback=idl.PinLaterJob(body=b"cb"))
    assert queues_named("createBatch", _args("createBatch", request=made)) == ["reports"]


def test_a_queue_grant_reaches_no_other_queue_s_batch() -> None:
    team = Grant("web", frozenset({"producer"}), ("feed_*",))
    theirs = "billing.b" + "1" * 24
    for method, kwargs in (("getBatch", {"batch": theirs}), ("sealBatch", {"batch": theirs}), (
            "enqueueJobs", {"request": idl.PinLaterBatchEnqueueRequest(queueName="feed_a", jobs=[], batch=theirs)})):
        with pytest.raises(AccessDenied, match=f"may not call {method} on queue 'billing'"):
            check(team, ("web",), method, _args(method, **kwargs), lambda q: True)
    check(team, ("web",), "getBatch", _args("getBatch", batch="feed_a.b" + "2" * 24), lambda q: True)


def test_check_refuses_methods_queues_and_new_queues() -> None:
    team = Grant("web", frozenset({"producer"}), ("feed_*",))
    enqueue = _args("enqueueJobs", request=idl.PinLaterEnqueueRequest(queueName="feed_a", jobs=[]))
    check(team, ("web",), "enqueueJobs", enqueue, lambda q: True)
    other = _args("enqueueJobs", request=idl.PinLaterEnqueueRequest(queueName="billing", jobs=[]))
    with pytest.raises(AccessDenied, match="'web' \\(producer on feed_\\*\\) may not call enqueueJobs on queue "
                                           "'billing'"):
        check(team, ("web",), "enqueueJobs", other, lambda q: True)
    with pytest.raises(AccessDenied, match="may not call dequeueJobs"):
        check(team, ("web",), "dequeueJobs", _args("dequeueJobs", request=idl.PinLaterDequeueRequest(
            queueName="feed_a", limit=1)), lambda q: True)

    def missing(queue: str) -> bool:
        raise QueueNotFound(f"queue {queue} does not exist")

    create = _args("createQueue", name="feed_new")
    check(team, ("web",), "createQueue", create, lambda q: True)  # exists: declaring it changes nothing
    with pytest.raises(AccessDenied, match="it does not exist, and only the admin role creates queues"):
        check(team, ("web",), "createQueue", create, missing)
    check(Grant("ops", frozenset({"admin"})), ("ops",), "createQueue", create, missing)
    with pytest.raises(AccessDenied, match="'ghost' has no role on this server"):
        check(None, ("ghost",), "getQueueNames", _args("getQueueNames"), lambda q: True)


@pytest.mark.parametrize("env, problem", [
    ({"PINLATER_SERVER_TLS_KEY": "k"}, "PINLATER_SERVER_TLS_KEY: needs PINLATER_SERVER_TLS_CERT"),
    ({"PINLATER_SERVER_ROLES": "r"}, "PINLATER_SERVER_ROLES: needs PINLATER_SERVER_TLS_CERT"),
    ({"PINLATER_SERVER_TLS_CERT": "c", "PINLATER_SERVER_ROLES": "r"},
     "PINLATER_SERVER_ROLES: roles need client certificates"),
])
def test_server_tls_settings_that_do_not_go_together(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingError, match=problem):
        _ = Settings.from_env(env).server_tls


def test_client_tls_settings() -> None:
    assert Settings.from_env({}).client_tls is None
    with pytest.raises(SettingError, match="PINLATER_CLIENT_TLS_CERT: needs PINLATER_CLIENT_TLS_CA"):
        _ = Settings.from_env({"PINLATER_CLIENT_TLS_CERT": "c"}).client_tls
    tls = Settings.from_env({"PINLATER_CLIENT_TLS_CA": "ca", "PINLATER_CLIENT_TLS_CERT": "c"}).client_tls
    assert tls is not None and (tls.ca, tls.cert, tls.key) == ("ca", "c", None)
    server = Settings.from_env({"PINLATER_SERVER_TLS_CERT": "both.pem"}).server_tls
    assert server is not None and server.key == "both.pem" and server.client_ca is None
