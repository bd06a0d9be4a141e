"""``pinlater``: the operators' command line.

Connection settings come from the PINLATER_* environment variables (see
``pinlater.settings``). Commands that answer with rows print a table, or JSON
with --json; the others print JSON. The server and dashboard commands come
from other packages through entry points (``pinlater.cli_commands``).
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pinlater.cli_commands import register_commands
from pinlater.errors import InvalidRequest, ShardConnectionFailed
from pinlater.kit.apps import add_app_command
from pinlater.kit.cli_output import INSTALL_HINT, one_line, print_result
from pinlater.kit.cli_runner import ErrorStyle, concurrency_cap, dequeue_rate, key_rate, run
from pinlater.kit.devcerts import add_dev_certs_command
from pinlater.kit.envsettings import read
from pinlater.kit.signals import on_signals
from pinlater.migrate import add_migrate_command
from pinlater.models import BatchStatus, Job, JobInfo
from pinlater.observe.trace_tree import add_trace_command
from pinlater.operators import Monitor
from pinlater.queue_config import QueueConfig
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.states import JobState


def _info_dict(info: JobInfo) -> dict[str, Any]:
    data: dict[str, Any] = {
        "descriptor": info.descriptor,
        "state": info.state.name,
        "attempts_allowed": info.attempts_allowed,
        "attempts_remaining": info.attempts_remaining,
        "custom_status": info.custom_status,
        "created_at_ms": info.created_at_ms,
        "run_after_ms": info.run_after_ms,
        "updated_at_ms": info.updated_at_ms,
        "claim": info.claim,
    }
    if info.key:
        data["key"] = info.key
    if info.body is not None:
        data["body"] = info.body.decode("utf-8", errors="replace")
    return data


# -- commands ------------------------------------------------------------------
def cmd_queues(c: JobService, a: argparse.Namespace) -> Any:
    rows = []
    # Through a server: one config per name (the wire has no call for all of them).
    if isinstance(c, JobService):
        configs = c.operators.queue_configs()
    else:
        configs = {n: c.queue_config(n) for n in c.queue_names()}
    for name, config in sorted(configs.items()):
        if config.paused:
            rate = "paused"
        else:
            rate = "unlimited" if config.max_dequeue_rate is None else f"{config.max_dequeue_rate:g}/s"
        rows.append({"queue": name, "priorities": config.priorities, "rate": rate,
                     "max_running": "unlimited" if config.max_running is None else config.max_running,
                     "key_rate": "unlimited" if config.key_rate is None else f"{config.key_rate:g}/s",
                     "key_max_running": "unlimited" if config.key_max_running is None else config.key_max_running,
                     "claim_timeout_ms": config.claim_timeout_ms, "retry": config.retry.kind})
    return rows


def cmd_create_queue(c: JobService, a: argparse.Namespace) -> Any:
    config = c.create_queue(a.queue, priorities=a.priorities, max_dequeue_rate=a.rate,
                            claim_timeout_ms=a.claim_timeout_ms)
    return json.loads(config.to_json())


def cmd_delete_queue(c: JobService, a: argparse.Namespace) -> Any:
    c.delete_queue(a.queue, _admin_secret(a))
    return {"deleted": a.queue}


def _admin_secret(a: argparse.Namespace) -> str | None:
    """From --secret-file (a file, or '-': standard input), else --secret,
    else PINLATER_ADMIN_SECRET. Never repeated in a message."""
    if a.secret_file is not None:
        return read_secret(a.secret_file)
    if a.secret:
        print("warning: --secret shows the admin secret to every user of this machine (ps, /proc) and keeps it in "
              "your shell's history; use --secret-file PATH, --secret-file - (standard input) or "
              "PINLATER_ADMIN_SECRET", file=sys.stderr)
        return str(a.secret)
    return read(os.environ, "PINLATER_ADMIN_SECRET", str, None)


def read_secret(path: str) -> str:
    """The first line of ``path`` without its line break ('-': standard
    input, asked for without echo on a terminal)."""
    try:
        if path == "-":
            text = getpass.getpass("admin secret: ") if sys.stdin.isatty() else sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise ValueError(f"cannot read the admin secret from {path}: {reason}") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise ValueError(f"the admin secret from {'standard input' if path == '-' else path} is empty")
    return secret


def cmd_enqueue(c: JobService, a: argparse.Namespace) -> Any:
    bodies = a.body or [line.rstrip("\n") for line in sys.stdin]
    jobs = [Job(body.encode(), priority=a.priority, run_after_ms=a.run_after_ms,
                attempts_allowed=a.attempts, key=a.key, unique=a.unique) for body in bodies]
    return c.enqueue(a.queue, jobs, batch=a.batch)


def cmd_lookup(c: JobService, a: argparse.Namespace) -> Any:
    found = c.lookup(a.descriptors, include_body=a.body)
    return [_info_dict(found[d]) if d in found else {"descriptor": d, "state": "NOT FOUND"}
            for d in a.descriptors]


def cmd_count(c: JobService, a: argparse.Namespace) -> Any:
    return {"queue": a.queue, "state": a.state.upper(), "future": a.future,
            "count": c.count(a.queue, a.state, priority=a.priority, future=a.future, body_regex=a.regex)}


def cmd_scan(c: JobService, a: argparse.Namespace) -> Any:
    result = c.scan(a.queue, a.state, priority=a.priority, future=a.future, continuation=a.continuation,
                    limit=a.limit, body_regex=a.regex, include_body=a.body)
    rows = [_info_dict(j) for j in result.jobs]
    if a.json:
        return {"jobs": rows, "continuation": result.continuation}
    print(f"continuation: {result.continuation}", file=sys.stderr)
    return rows


def cmd_retry_failed(c: JobService, a: argparse.Namespace) -> Any:
    n = c.retry_failed(a.queue, priority=a.priority, attempts=a.attempts,
                       run_after_ms=a.run_after_ms, limit=a.limit)
    return {"queue": a.queue, "retried": n}


def cmd_delete(c: JobService, a: argparse.Namespace) -> Any:
    n = c.delete_jobs(a.queue, a.state, priority=a.priority, body_regex=a.regex, limit=a.limit)
    return {"queue": a.queue, "deleted": n}


def cmd_cancel(c: JobService, a: argparse.Namespace) -> Any:
    result = c.cancel(a.queue, a.descriptors)
    out = {"queue": a.queue, "cancelled": result.cancelled, "interrupted": result.interrupted,
           "finished": result.finished, "unknown": result.unknown, "unapplied": result.unapplied}
    if result.unapplied:
        print_result(a, out)  # what was done, before the error says what was not
        raise ShardConnectionFailed(
            f"{len(result.unapplied)} of {len(a.descriptors)} jobs not cancelled, their shard not reached "
            f"({next(iter(result.unapplied.values()))}): run the command again for them")
    return out


def cmd_create_batch(c: JobService, a: argparse.Namespace) -> Any:
    batch = c.create_batch(a.queue, Job(a.body.encode(), priority=a.priority), description=a.description)
    return _batch_dict(c.batch_status(batch))


def cmd_seal_batch(c: JobService, a: argparse.Namespace) -> Any:
    return _batch_dict(c.seal_batch(a.batch))


def cmd_batch(c: JobService, a: argparse.Namespace) -> Any:
    return _batch_dict(c.batch_status(a.batch))


def _batch_dict(status: BatchStatus) -> dict[str, Any]:
    return {"batch": status.batch, "state": status.state, "total": status.total, "succeeded": status.succeeded,
            "failed": status.failed, "pending": status.pending, "callback": status.callback,
            "description": status.description, "created_at_ms": status.created_at_ms,
            "updated_at_ms": status.updated_at_ms}


def cmd_cancel_batch(c: JobService, a: argparse.Namespace) -> Any:
    result = c.cancel_batch(a.batch)
    out = {"batch": a.batch, "cancelled": result.cancelled, "interrupted": result.interrupted,
           "finished": result.finished, "unknown": result.unknown, "unapplied": result.unapplied}
    if result.unapplied:
        print_result(a, out)
        raise ShardConnectionFailed(
            f"{len(result.unapplied)} jobs of batch {a.batch} not cancelled, their shard not reached "
            f"({next(iter(result.unapplied.values()))}): run the command again")
    return out


def cmd_set_rate(c: JobService, a: argparse.Namespace) -> Any:
    return json.loads(c.set_rate(a.queue, a.rate).to_json())


def cmd_set_concurrency(c: JobService, a: argparse.Namespace) -> Any:
    return _with_running(c, c.set_concurrency(a.queue, a.max_running))


# An option left out: the setting stays as it is.
_UNCHANGED: Any = object()


def cmd_set_unique_period(c: JobService, a: argparse.Namespace) -> Any:
    return json.loads(c.update_queue(a.queue, unique_succeeded_ms=a.ms).to_json())


def cmd_set_key_limits(c: JobService, a: argparse.Namespace) -> Any:
    changes: dict[str, Any] = {}
    if a.rate is not _UNCHANGED:
        changes["key_rate"] = a.rate
    if a.max_running is not _UNCHANGED:
        changes["key_max_running"] = a.max_running
    if not changes:
        raise InvalidRequest("give --rate, --max-running or both")
    config = c.update_queue(a.queue, **changes)
    return {**json.loads(config.to_json()), "key_rate": config.key_rate, "key_max_running": config.key_max_running}


def _with_running(c: JobService, config: QueueConfig) -> dict[str, Any]:
    """A config as JSON, with its cap (null: none) and the jobs running now."""
    return {**json.loads(config.to_json()), "max_running": config.max_running,
            "running": c.count(config.name, JobState.RUNNING)}


def cmd_pause(c: JobService, a: argparse.Namespace) -> Any:
    return json.loads(c.pause(a.queue).to_json())


def cmd_resume(c: JobService, a: argparse.Namespace) -> Any:
    return json.loads(c.resume(a.queue).to_json())


def cmd_config(c: JobService, a: argparse.Namespace) -> Any:
    return _with_running(c, c.queue_config(a.queue, fresh=True))


def cmd_shards(c: JobService, a: argparse.Namespace) -> Any:
    return [{"shard": s, **h.as_dict()} for s, h in c.operators.shard_status(probe=True).items()]


def cmd_restore_queues(c: JobService, a: argparse.Namespace) -> Any:
    if a.all and a.queues:
        raise ValueError("name the queues to restore, or --all, not both")
    if a.paused and not (a.all or a.queues):
        raise ValueError("--paused is for restoring: name the queues, or --all")
    found = c.operators.unregistered_queues()
    if not a.queues and not a.all:
        return [{"queue": name, "priorities": u.priorities, "shards": ",".join(u.shards)}
                for name, u in sorted(found.items())]
    restored = c.operators.restore_queues(sorted(found) if a.all else a.queues, paused=a.paused)
    return [{"queue": name, "priorities": config.priorities, "paused": config.paused} for name, config in
            restored.items()]


def cmd_monitor(c: JobService, a: argparse.Namespace) -> Any:
    monitor = Monitor(c.operators, interval_s=a.interval)
    if a.once:
        return monitor.run_once().as_dict()
    on_signals({signal.SIGTERM: monitor.stop, signal.SIGINT: monitor.stop})
    monitor.run_forever()
    return None


# -- parser ----------------------------------------------------------------------
def _state(text: str) -> str:
    JobState.parse(text)
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0.01 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0.01 to 86400")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinlater", description="Operate a PinLater job service.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    parser.add_argument("--server", metavar="HOST:PORT[,...]",
                        help="call these `pinlater server`s (TLS per PINLATER_CLIENT_TLS_*) instead of the stores; "
                             "not for shards, monitor, restore-queues and migrate, which work on the stores "
                             "themselves")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Callable[[JobService, argparse.Namespace], Any], text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(fn=fn)
        return p

    add("queues", cmd_queues, "list queues with their configs")
    p = add("create-queue", cmd_create_queue, "create a queue (idempotent)")
    p.add_argument("queue")
    p.add_argument("--priorities", type=int)
    p.add_argument("--rate", type=dequeue_rate, help="max dequeues per second (0 pauses; 'unlimited')")
    p.add_argument("--claim-timeout-ms", type=int)
    p = add("delete-queue", cmd_delete_queue, "delete a queue and all its jobs (needs the admin secret)")
    p.add_argument("queue")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--secret-file", metavar="PATH",
                       help="read the admin secret from the first line of PATH ('-': standard input); "
                            "default: $PINLATER_ADMIN_SECRET")
    given.add_argument("--secret", help="the admin secret itself: visible to every user of this machine in the "
                                        "process list; prefer --secret-file")
    p = add("enqueue", cmd_enqueue, "enqueue jobs (bodies as arguments, or one per stdin line)")
    p.add_argument("queue")
    p.add_argument("body", nargs="*")
    p.add_argument("--priority", type=int, default=1)
    p.add_argument("--run-after-ms", type=int)
    p.add_argument("--attempts", type=int)
    p.add_argument("--key", default="", help="the jobs' fairness key (a tenant, an account...): a dequeue "
                                             "serves the keys of a priority in turn")
    p.add_argument("--unique", default="", help="the jobs' unique key: while a job of the queue with it is pending "
                                                "or running, no other is stored and its descriptor is printed")
    p.add_argument("--batch", help="the batch the jobs join (create-batch)")
    p = add("lookup", cmd_lookup, "show jobs by descriptor")
    p.add_argument("descriptors", nargs="+")
    p.add_argument("--body", action="store_true", help="include bodies")
    for name, fn, text in (("count", cmd_count, "count jobs in a state"),
                           ("scan", cmd_scan, "list jobs in a state, newest first")):
        p = add(name, fn, text)
        p.add_argument("queue")
        p.add_argument("state", type=_state, help="pending, running, succeeded or failed")
        p.add_argument("--priority", type=int)
        p.add_argument("--future", action="store_true", help="pending jobs whose run_after is ahead")
        p.add_argument("--regex", help="only jobs whose body matches")
        if name == "scan":
            p.add_argument("--limit", type=int, default=20)
            p.add_argument("--continuation", default="0")
            p.add_argument("--body", action="store_true")
    p = add("retry-failed", cmd_retry_failed, "move failed jobs back to pending")
    p.add_argument("queue")
    p.add_argument("--priority", type=int)
    p.add_argument("--attempts", type=int, default=1)
    p.add_argument("--run-after-ms", type=int)
    p.add_argument("--limit", type=int, default=1000)
    p = add("delete", cmd_delete, "delete jobs in a state")
    p.add_argument("queue")
    p.add_argument("state", type=_state)
    p.add_argument("--priority", type=int)
    p.add_argument("--regex")
    p.add_argument("--limit", type=int, default=1000)
    p = add("cancel", cmd_cancel, "end jobs now: pending ones never run, running ones end FAILED (never retried)")
    p.add_argument("queue")
    p.add_argument("descriptors", nargs="+")
    p = add("create-batch", cmd_create_batch, "make a batch whose callback job (BODY, on QUEUE) runs once every job "
                                              "enqueued into it (enqueue --batch) has ended and it is sealed")
    p.add_argument("queue")
    p.add_argument("body")
    p.add_argument("--priority", type=int, default=1)
    p.add_argument("--description", default="")
    p = add("seal-batch", cmd_seal_batch, "say a batch gets no more jobs: its callback runs once they have all ended")
    p.add_argument("batch")
    p = add("batch", cmd_batch, "show a batch's progress: its jobs by how they ended, and its callback")
    p.add_argument("batch")
    p = add("cancel-batch", cmd_cancel_batch, "cancel every job of a batch that has not ended, and its callback")
    p.add_argument("batch")
    p = add("set-rate", cmd_set_rate, "set a queue's max dequeue rate (jobs/s, or 'unlimited')")
    p.add_argument("queue")
    p.add_argument("rate", type=dequeue_rate)
    p = add("set-concurrency", cmd_set_concurrency,
            "set how many jobs of a queue may run at once, over every worker and shard (N, or 'unlimited')")
    p.add_argument("queue")
    p.add_argument("max_running", type=concurrency_cap, metavar="N|unlimited")
    p = add("set-key-limits", cmd_set_key_limits,
            "set how many jobs of each fairness key of a queue may start per second and run at once, "
            "over every worker and shard")
    p.add_argument("queue")
    p.add_argument("--rate", type=key_rate, metavar="R|unlimited", default=_UNCHANGED,
                   help="jobs per second per key, or 'unlimited'")
    p.add_argument("--max-running", type=concurrency_cap, metavar="N|unlimited", default=_UNCHANGED,
                   help="jobs of one key running at once, or 'unlimited'")
    p = add("set-unique-period", cmd_set_unique_period,
            "set how long a job's unique key stays held after the job succeeded (0: free once it ends)")
    p.add_argument("queue")
    p.add_argument("ms", type=int, help="milliseconds")
    p = add("pause", cmd_pause, "stop all dequeues of a queue")
    p.add_argument("queue")
    p = add("resume", cmd_resume, "resume dequeues of a paused queue at its rate")
    p.add_argument("queue")
    p = add("config", cmd_config, "show a queue's config")
    p.add_argument("queue")
    add("shards", cmd_shards, "show each shard's health")
    p = add("restore-queues", cmd_restore_queues,
            "list the queues whose jobs the shards hold but the control store has no config for (a control "
            "store that lost its data, or a delete cut short), or register them again with default settings")
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="register these again")
    p.add_argument("--all", action="store_true", help="register every one listed again")
    p.add_argument("--paused", action="store_true",
                   help="register them paused, to set their rates and caps before `pinlater resume`")
    p = add("monitor", cmd_monitor, "expire claims and collect finished jobs (forever, or --once)")
    p.set_defaults(long_running=True)
    p.add_argument("--once", action="store_true")
    p.add_argument("--interval", type=_seconds, default=5.0, help="seconds between passes")
    add_migrate_command(sub)
    add_app_command(sub)
    add_dev_certs_command(sub)
    add_trace_command(sub)
    register_commands(sub)
    return parser


def _missing_package(exc: BaseException, args: argparse.Namespace) -> str | None:
    # A command loads its extra's packages when it runs.
    if isinstance(exc, ModuleNotFoundError):
        return f"`pinlater {args.command}` needs a package that is not installed: {one_line(str(exc))} ({INSTALL_HINT})"
    return None


# Exit status: 0 done, 2 refused (bad input, setting or store), 1 an internal
# error. Settings (SettingError names the variable) and argument values are ValueErrors.
ERRORS = ErrorStyle(refused=(ValueError,), pinlater_error="error ({code}): {text}", hint=_missing_package)


def main(argv: Sequence[str] | None = None) -> int:
    """A user never sees a traceback unless asked (-v)."""
    return run(build_parser(), argv, ERRORS, _run)


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "run", None) is not None:  # server, server-stats, dashboard: no client of their own
        if args.server:
            raise ValueError(f"--server is for the commands on queues and jobs, not `pinlater {args.command}`")
        return int(args.run(args))
    # The stores, unless --server: PINLATER_SERVERS is for applications.
    if args.server:
        result = _through_server(args)
    else:
        with JobService.from_settings() as client:
            result = args.fn(client, args)
    if result is not None:
        print_result(args, result)
    return 0


STORES_ONLY = frozenset({"shards", "monitor", "restore-queues"})


def _through_server(args: argparse.Namespace) -> Any:
    from pinlater.thrift.client import ThriftClient

    if args.command in STORES_ONLY:
        raise ValueError(f"`pinlater {args.command}` works on the stores themselves: run it without --server")
    settings = Settings.from_env()
    servers = [s.strip() for s in args.server.split(",") if s.strip()]
    with ThriftClient(servers, source=f"pinlater-cli-{os.getpid()}", timeout_s=settings.client_timeout_s,
                      tls=settings.client_tls) as client:
        return args.fn(client, args)


if __name__ == "__main__":
    sys.exit(main())
