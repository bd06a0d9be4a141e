# mypy: disable-error-code="no-untyped-call,untyped-decorator"
# (Kombu, Celery and happybase ship without complete type hints.)
"""Guards on the library internals the project relies on, one test each:
an upgrade that changes one fails here, naming the internal and the
version it was checked against, instead of in production. No servers:
fakeredis, Kombu's memory transport and objects built in memory.

Where each is used and why is in a comment at the place of use."""

from __future__ import annotations

import inspect
import queue
import sys
from collections import OrderedDict
from importlib.metadata import version
from typing import Any

import fakeredis
import pytest
import redis

from pinlater.stores.redis import loader, pool

CHECKED = {"redis": "8.1", "kombu": "5.7", "celery": "5.7", "happybase": "1.3"}


def guard(condition: object, package: str, internal: str, change: str) -> None:
    """Fail naming the internal, the version it was checked against and
    the installed one."""
    if not condition:
        pytest.fail(
            f"{package} {version(package)} changed {internal} (checked against {package} {CHECKED[package]}): "
            f"{change}; see its use before upgrading",
            pytrace=False,
        )


# -- redis-py: pinlater.stores.redis.pool.is_after_send reads its error messages -----------------


def test_redis_says_when_a_command_failed_after_it_was_sent() -> None:
    import redis._parsers.socket as parser_socket
    import redis.connection as connection

    from pinlater.stores.redis.pool import AFTER_SEND_MARKERS

    source = inspect.getsource(connection) + inspect.getsource(parser_socket)
    for marker in AFTER_SEND_MARKERS:
        guard(marker in source, "redis", f"the error message {marker!r}",
              "an enqueue that timed out after it was sent would be sent to another shard too")
    guard("Timeout connecting to server" in source, "redis", "the connect timeout's message",
          "a connect timeout must not read as after-send")
    from pinlater.stores.redis.pool import BAD_PING

    guard(BAD_PING in source, "redis", "the health check's message",
          "a server of another kind on a store's port would not be named as such")


# -- redis-py: pinlater.stores.redis.loader.call sends EVALSHA on a pooled connection --------------

@pytest.fixture
def fake() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


# -- redis-py: pinlater.stores.redis.pool strips its pipeline prefix from errors -----------------


def test_redis_pipeline_errors_carry_the_server_text_after_a_prefix(fake: fakeredis.FakeRedis) -> None:
    """A MULTI pipeline's failed command is named, with its arguments, in
    front of the server's text; a refusal to write must still read as one,
    and the arguments (a job body, a config) stay out of the message."""
    fake.set("plain", "text")
    pipe = fake.pipeline(transaction=True)
    pipe.set("other", "body-secret")
    pipe.incr("plain")
    with pytest.raises(redis.exceptions.ResponseError) as info:
        pipe.execute()
    text = str(info.value)
    guard(text.startswith("Command # 2 (") and pool.PIPELINE_ERROR in text, "redis",
          "Pipeline.annotate_exception", f"a pipeline's error reads {text!r}")
    assert pool.describe(info.value) == text.partition(pool.PIPELINE_ERROR)[2]
    refused = redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas to write.")
    fake.pipeline(transaction=True).annotate_exception(refused, 1, ("HSET", "plc:queues", "q", "config-secret"))
    assert "config-secret" in str(refused)  # the prefix quotes the arguments...
    assert pool.is_write_refused(refused)
    assert pool.describe(refused) == "NOREPLICAS Not enough good replicas to write."  # ...the message does not


def test_redis_script_call_answers_as_script_call_does(fake: fakeredis.FakeRedis) -> None:
    script = fake.register_script("return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}")
    guard(isinstance(getattr(script, "sha", None), str) and isinstance(getattr(script, "script", None), str),
          "redis", "Script.sha / Script.script", "a registered Script lacks its sha or source text")
    guard("client" in inspect.signature(script.__call__).parameters, "redis", "Script.__call__",
          "it no longer takes client=")
    ours = loader.call(fake, script, ["k"], ["a"])
    theirs = script(keys=["k"], args=["a"], client=fake)
    guard(ours == [b"k", b"a", 1] and theirs == [b"k", b"a", 2], "redis", "Connection.send_command/read_response",
          f"EVALSHA sent on a pooled connection answered {ours!r}, Script() answered {theirs!r}")


def test_redis_script_call_loads_the_script_again_after_a_flush(fake: fakeredis.FakeRedis) -> None:
    script = fake.register_script("return ARGV[1]")
    fake.script_flush()
    with pytest.raises(redis.exceptions.NoScriptError):
        fake.evalsha(script.sha, 0, "x")  # type: ignore[attr-defined]
    guard(loader.call(fake, script, [], ["x"]) == b"x", "redis", "NoScriptError",
          "a NOSCRIPT reply no longer raises NoScriptError from read_response")


def test_redis_pool_hands_out_a_connection_without_a_command_name(fake: fakeredis.FakeRedis) -> None:
    pool = fake.connection_pool
    guard(all(p.default is not inspect.Parameter.empty or p.kind is p.VAR_POSITIONAL or p.kind is p.VAR_KEYWORD
              for p in list(inspect.signature(pool.get_connection).parameters.values())),
          "redis", "ConnectionPool.get_connection", "it needs arguments")
    conn = pool.get_connection()
    try:
        guard(callable(getattr(conn, "send_command", None)) and callable(getattr(conn, "read_response", None))
              and callable(getattr(conn, "disconnect", None)), "redis", "Connection",
              "send_command, read_response or disconnect is gone")
    finally:
        pool.release(conn)


# -- Kombu: workers.qos subclasses virtual.QoS, workers.transport/channel read its state ------

@pytest.fixture
def memory_channel() -> Any:
    kombu = pytest.importorskip("kombu")
    connection = kombu.Connection("memory://")
    channel = connection.channel()
    yield channel
    channel.close()
    connection.release()


def test_kombu_channel_makes_its_qos_on_first_use(memory_channel: Any) -> None:
    guard(memory_channel._qos is None, "kombu", "virtual.Channel._qos",
          "a new channel's _qos is not None (workers.transport reads it to skip channels without one)")
    qos = memory_channel.qos
    guard(memory_channel._qos is qos, "kombu", "virtual.Channel._qos", "the qos property no longer stores it there")


def test_kombu_qos_keeps_delivered_and_acked_tags(memory_channel: Any) -> None:
    qos = memory_channel.qos
    delivered, dirty = getattr(qos, "_delivered", None), getattr(qos, "_dirty", None)
    guard(isinstance(delivered, OrderedDict) and isinstance(dirty, set), "kombu", "virtual.QoS._delivered/_dirty",
          f"they are {type(delivered).__name__} and {type(dirty).__name__}, not an OrderedDict and a set")
    guard(getattr(delivered, "restored", None) is False, "kombu", "virtual.QoS._delivered.restored",
          "the restored flag (restore_unacked_once runs once) is gone")
    guard(callable(getattr(getattr(qos, "_on_collect", None), "cancel", None)), "kombu", "virtual.QoS._on_collect",
          "the exit finalizer has no cancel()")
    qos.append("message", "tag-1")
    qos.append("message", "tag-2")
    qos._quick_ack("tag-1")
    guard(list(qos._delivered) == ["tag-1", "tag-2"] and qos._dirty == {"tag-1"}, "kombu", "virtual.QoS._quick_ack",
          "an ack no longer adds the tag to _dirty, leaving it in _delivered")
    qos._flush()
    guard(list(qos._delivered) == ["tag-2"] and not qos._dirty, "kombu", "virtual.QoS._flush",
          "a flush no longer drops acked tags from _delivered")


def test_kombu_transport_keeps_consumer_callbacks_by_queue(memory_channel: Any) -> None:
    memory_channel.queue_declare("guarded")
    memory_channel.basic_consume("guarded", no_ack=True, callback=lambda message: None, consumer_tag="c1")
    callbacks = getattr(memory_channel.connection, "_callbacks", None)
    guard(isinstance(callbacks, dict) and callable(callbacks.get("guarded")), "kombu", "virtual.Transport._callbacks",
          "basic_consume no longer registers the queue's callback there (workers.channel delivers through it)")


def test_kombu_connection_translates_transport_errors() -> None:
    kombu = pytest.importorskip("kombu")
    connection = kombu.Connection("memory://")
    reraise: Any = getattr(connection, "_reraise_as_library_errors", None)
    guard(callable(reraise), "kombu", "Connection._reraise_as_library_errors",
          "it is gone (workers.direct_publish wraps a publish in it, as Producer.publish does)")
    errors = connection.recoverable_connection_errors
    guard(errors, "kombu", "Connection.recoverable_connection_errors", "the memory transport lists none")
    with pytest.raises(kombu.exceptions.OperationalError), reraise():
        raise errors[0]("lost")


# -- Celery: workers.direct_publish repeats Task.apply_async's path; workers.app reads -Q, -X -----

def test_celery_task_message_signature_is_the_one_direct_publish_calls() -> None:
    amqp = pytest.importorskip("celery.app.amqp")
    positional = [
        "task_id", "name", "args", "kwargs", "countdown", "eta", "group_id", "group_index", "expires",
        "retries", "chord", "callbacks", "errbacks", "reply_to", "time_limit", "soft_time_limit",
        "create_sent_event", "root_id", "parent_id", "shadow", "chain",
    ]
    parameters = list(inspect.signature(amqp.AMQP.as_task_v2).parameters)
    guard(parameters[1:len(positional) + 1] == positional, "celery", "AMQP.as_task_v2",
          f"its leading parameters are now {parameters[1:len(positional) + 1]}")
    guard({"ignore_result", "replaced_task_nesting", "argsrepr", "kwargsrepr"} <= set(parameters), "celery",
          "AMQP.as_task_v2", "a keyword workers.direct_publish passes is gone")


def test_celery_router_keeps_its_expanded_routes_in_order() -> None:
    """A delay_many shares one route between its calls when every router
    ignores the arguments: it reads them from ``Router.routes``."""
    celery = pytest.importorskip("celery")
    routes = pytest.importorskip("celery.app.routes")

    def by_name(name: str, args: object, kwargs: object, options: object, task: object = None) -> None:
        return None

    app = celery.Celery("guards", set_as_current=False)
    app.conf.task_routes = ({"guards.t": {"queue": "q"}}, by_name)
    kept = getattr(app.amqp.router, "routes", None)
    guard(isinstance(kept, list) and len(kept) == 2 and isinstance(kept[0], routes.MapRoute) and kept[1] is by_name,
          "celery", "Router.routes", "it no longer lists task_routes expanded, maps as MapRoute, in order")


def test_celery_task_exec_options_and_queue_selection() -> None:
    celery = pytest.importorskip("celery")
    app = celery.Celery("guards", set_as_current=False)

    @app.task(name="guards.t", serializer="pickle", shared=False)
    def t() -> None:
        """A task of the guard's own app."""

    guard(app.tasks["guards.t"]._get_exec_options().get("serializer") == "pickle", "celery", "Task._get_exec_options",
          "it no longer returns the task's own publish options")
    # workers.app reads -Q and -X from the options celeryd_init passes, by these names.
    command = pytest.importorskip("celery.bin.worker").worker
    names = {param.name for param in command.params}
    guard({"queues", "exclude_queues"} <= names, "celery", "celery worker's options",
          "-Q or -X is no longer passed as queues or exclude_queues")
    source = inspect.getsource(pytest.importorskip("celery.apps.worker").Worker.on_before_init)
    guard("celeryd_init.send(" in source and "options=kwargs" in source, "celery", "Worker.on_before_init",
          "celeryd_init no longer gets the worker's options")


def test_celery_worker_keeps_revoked_task_ids_in_its_state_module() -> None:
    """workers/qos.py tells a revoked task's ACK by the ids Celery keeps in
    ``celery.worker.state.revoked``; and Celery ACKs a revoked request's
    message (``Request._announce_revoked`` calls ``acknowledge``)."""
    state = pytest.importorskip("celery.worker.state")
    request = pytest.importorskip("celery.worker.request")
    revoked = getattr(state, "revoked", None)
    guard(revoked is not None and hasattr(revoked, "add") and hasattr(revoked, "__contains__"), "celery",
          "celery.worker.state.revoked", "the worker's set of revoked task ids is gone")
    announce = inspect.getsource(request.Request._announce_revoked)
    guard("self.acknowledge()" in announce, "celery", "Request._announce_revoked",
          "a revoked task's message is no longer ACKed there")
    # workers/request.py skips a cancelled held job as Celery skips a revoked one.
    guard(list(inspect.signature(request.Request._announce_revoked).parameters)
          == ["self", "reason", "terminated", "signum", "expired"], "celery", "Request._announce_revoked",
          "its parameters changed")
    guard("if self.revoked():" in inspect.getsource(request.Request.execute_using_pool), "celery",
          "Request.execute_using_pool", "it no longer asks revoked() before running a request")


# -- happybase: tasks.hbase.pool closes idle connections; tasks.hbase.idl reuses its IDL --------

def test_happybase_pool_keeps_idle_connections_in_a_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    happybase = pytest.importorskip("happybase")
    monkeypatch.setattr(happybase.Connection, "open", lambda self: None)  # no server
    pool = happybase.ConnectionPool(2, host="127.0.0.1", port=1)
    idle: Any = getattr(pool, "_queue", None)
    guard(isinstance(idle, queue.Queue) and idle.qsize() == 2, "happybase", "ConnectionPool._queue",
          "it is not a queue.Queue holding the idle connections")
    guard(all(isinstance(c, happybase.Connection) for c in list(idle.queue)), "happybase", "ConnectionPool._queue",
          "it holds something other than Connections")


def test_happybase_registers_hbase_thrift1_idl_module() -> None:
    happybase = pytest.importorskip("happybase")
    module = sys.modules.get("Hbase_thrift")
    guard(module is not None and getattr(module, "Hbase", None) is happybase.connection.Hbase, "happybase",
          "sys.modules['Hbase_thrift']", "happybase no longer loads HBase's IDL under that module name")
