"""``pinlater-typeahead``: serve and query the contacts typeahead.

    pinlater-typeahead serve [--host H] [--port P]     the endpoint and search page (tasks.typeahead.http)
    pinlater-typeahead lookup USER_ID QUERY [--limit N] [--sources A,B] [--json]
    pinlater-typeahead serve-thrift [--host H] [--port P] [--metrics-port M] [--processes N]
    pinlater-typeahead link ACCOUNT USER_ID            an external account is the user's; fix-up jobs
    pinlater-typeahead unlink ACCOUNT                  it is nobody's; fix-up jobs
    pinlater-typeahead index-importers [--page N]      note the accounts of imports stored before
                                                       links could find them (once, after upgrading)

Both look contacts up in ``tasks.typeahead.index.ContactsIndex.from_env()``
(settings from the environment: PINLATER_TYPEAHEAD_*, ``tasks.typeahead.settings``,
and PINLATER_HBASE_*); ``serve`` listens on PINLATER_TYPEAHEAD_HTTP. Exit
status: 0 done, 2 any error, printed as one line on stderr, never a
traceback (unless -v).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pinlater.kit import cli_runner
from pinlater.kit.cli_output import one_line
from pinlater.kit.cli_runner import ErrorStyle, add_serve_command, command_parser, port_number, run
from pinlater.kit.httpserver import http_tls
from pinlater.kit.signals import on_signals
from tasks.httpserve import parse_user_id
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.http import Lookup, TypeaheadServer, lookup_json, parse_query, timed_lookup
from tasks.typeahead.rank import MAX_LIMIT, Match
from tasks.typeahead.sources import parse_filter

if TYPE_CHECKING:
    from pinlater.thrift.serving import Security
    from tasks.typeahead.actions import ContactActions
    from tasks.typeahead.settings import TypeaheadSettings


@contextlib.contextmanager
def index_lookup() -> Iterator[Lookup]:
    """The environment's contacts index, closed after (when it can be)."""
    # Imported here: the index needs HBase's client and settings; the
    # endpoint and the page do not.
    from tasks.typeahead.index import ContactsIndex

    index = ContactsIndex.from_env()
    try:
        yield index.lookup
    finally:
        close = getattr(index, "close", None)
        if callable(close):
            close()


def cmd_serve(args: argparse.Namespace) -> int:
    from tasks.typeahead.settings import TypeaheadSettings  # here: it imports HBase's client, as the index does
    from workers.gc_policy import tune_gc

    settings = TypeaheadSettings.from_env()
    host, port = cli_runner.listen_address(args, settings.http.host, settings.http.port)
    with index_lookup() as lookup:
        tune_gc()  # a process serving lookups: no full collection of what it started with stops them all
        cli_runner.serve_until_signal("pinlater-typeahead", host, port,
                                      lambda h, p: TypeaheadServer(lookup, h, p, tls=http_tls()))
    return 0


def cmd_serve_thrift(args: argparse.Namespace) -> int:
    """The Contacts Service until SIGTERM or SIGINT, then its calls in flight finished."""
    # Imported here: the server needs the index's settings, as the index does.
    from tasks import runtime as task_runtime
    from tasks.typeahead.runtime import runtime
    from tasks.typeahead.service import ContactsServer, security_of
    from tasks.typeahead.settings import TypeaheadSettings
    from workers.gc_policy import tune_gc

    settings = TypeaheadSettings.from_env()
    host, port = cli_runner.listen_address(args, settings.thrift.host, settings.thrift.port)
    metrics_port = settings.thrift_metrics_port if args.metrics_port is None else args.metrics_port
    security = security_of(settings.thrift_tls, settings.thrift_roles)
    processes = settings.thrift_processes if args.processes is None else args.processes
    if processes > 1:
        return _serve_processes(args, settings, host, port, processes, metrics_port or None, security)
    with index_lookup() as lookup, contextlib.ExitStack() as stack:
        stack.callback(task_runtime.close)  # the updates' app data and HBase pair
        try:
            server = ContactsServer(lookup, host, port, writer=runtime(), security=security,
                                    insecure=settings.thrift_insecure, metrics_port=metrics_port or None)
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        on_signals({signal.SIGTERM: server.request_stop, signal.SIGINT: server.request_stop,
                    signal.SIGHUP: server.request_reload})
        tune_gc()  # it runs the workers' page functions (rebuild, fix-ups), so it collects as they do
        server.start()
        metrics = f", metrics on http://{host}:{server.metrics.port}/metrics" if server.metrics else ""
        print(f"pinlater-typeahead thrift listening on {server.host}:{server.port}{metrics}", flush=True)
        server.serve_forever(grace_s=args.grace)
    return 0


def _serve_processes(args: argparse.Namespace, settings: TypeaheadSettings, host: str, port: int, processes: int,
                     metrics_port: int | None, security: Security) -> int:
    """``serve-thrift --processes N``: N children (``tasks.typeahead.service_child``)
    on one port, the way ``pinlater server --processes N`` runs."""
    from pinlater.observe.seam import app_store_families_of
    from pinlater.thrift.serving import Program, check_exposure, supervise
    from tasks.typeahead import service_child
    from tasks.typeahead.service import EXPOSURE_SETTINGS, LAYOUT

    check_exposure(host, security, settings.thrift_insecure, *EXPOSURE_SETTINGS)
    options = service_child.ContactsChildOptions(args.grace, log_level=logging.getLogger().getEffectiveLevel())
    program = Program("contacts thrift server", "pinlater-contacts", service_child.MODULE, options.to_json(),
                      args.grace, LAYOUT, app_store_families_of)
    return supervise(program, host, port, processes, metrics_port=metrics_port, banner="pinlater-typeahead thrift")


def cmd_lookup(args: argparse.Namespace) -> int:
    user_id = parse_user_id(args.user_id)
    query = parse_query(args.query)
    if not 1 <= args.limit <= MAX_LIMIT:
        raise ValueError(f"--limit must be in 1..{MAX_LIMIT}, got {args.limit}")
    sources = None if args.sources is None else parse_filter(args.sources)
    with index_lookup() as lookup:
        result, took_ms = timed_lookup(lookup, user_id, query, args.limit, sources)
    if args.json:
        print(json.dumps(lookup_json(user_id, query, result, took_ms, sources), indent=2, ensure_ascii=False))
        return 0
    for match in result.matches:
        print(_describe_match(match))
    print(f"{len(result.matches)} result(s), served by {result.served_by} in {took_ms:.1f} ms")
    return 0


@contextlib.contextmanager
def _actions() -> Iterator[ContactActions]:
    """Contact actions on the environment's app data and PinLater client
    (in-process, or the servers of PINLATER_SERVERS), closed after."""
    from pinlater import connect
    from pinlater.settings import Settings
    from tasks.appdata.store import AppData
    from tasks.typeahead.actions import ContactActions

    with AppData.from_env() as store, connect(Settings.from_env(), source="pinlater-typeahead") as client:
        yield ContactActions(store, client)


def cmd_link(args: argparse.Namespace) -> int:
    from tasks.appdata.contacts import check_account

    account, user_id = check_account(args.account), parse_user_id(args.user_id)
    with _actions() as actions:
        jobs = actions.link_account(account, user_id)
    print(f"{one_line(account, 80)} linked to user {user_id}; fix-up jobs {', '.join(jobs)}")
    return 0


def cmd_unlink(args: argparse.Namespace) -> int:
    from tasks.appdata.contacts import check_account

    account = check_account(args.account)
    with _actions() as actions:
        removed = actions.unlink_account(account)
    print(f"{one_line(account, 80)} {'unlinked' if removed else 'was not linked'}; fix-up jobs enqueued")
    return 0


def cmd_index_importers(args: argparse.Namespace) -> int:
    from tasks.appdata import contacts
    from tasks.appdata.store import AppData

    if not 1 <= args.page <= 10_000:
        raise ValueError(f"--page must be in 1..10000, got {args.page}")

    def progress(shard: int, imports: int, accounts: int) -> None:
        print(f"shard {shard}: {imports} imports, {accounts} accounts noted so far", file=sys.stderr, flush=True)

    with AppData.from_env() as store:
        imports, accounts = contacts.index_importers(store, page=args.page, progress=progress)
    print(f"{imports} imports, {accounts} accounts noted")
    return 0


def _describe_match(match: Match) -> str:
    # Names are other people's input: one line, no terminal control characters.
    name = one_line("".join(c if c.isprintable() else " " for c in match.contact.name), 100)
    others = [s for s in match.sources if s != match.source]
    also = f"  (also in: {', '.join(others)})" if others else ""
    who = match.contact.key if match.contact.user_id is None else f"user {match.contact.user_id}"
    return f"{match.score:.3f}  {name}  [{match.source}]  {who}{also}"


def _processes(text: str) -> int:
    from pinlater.settings import parse_server_processes

    try:
        return parse_server_processes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command_parser("pinlater-typeahead", "Serve and query the contacts typeahead.")
    add_serve_command(
        sub, "serve the JSON endpoint and the search page until SIGTERM or SIGINT", cmd_serve, "PINLATER_TYPEAHEAD_HTTP"
    )
    p = add_serve_command(sub, "serve the Contacts Service (Thrift) until SIGTERM or SIGINT", cmd_serve_thrift,
                          "PINLATER_TYPEAHEAD_THRIFT", name="serve-thrift")
    p.add_argument("--metrics-port", type=port_number,
                   help="/metrics and /stats.json port (default: PINLATER_TYPEAHEAD_THRIFT_METRICS_PORT; 0: none)")
    p.add_argument("--grace", type=float, default=30.0, help="seconds calls in flight get to finish on SIGTERM")
    p.add_argument("--processes", type=_processes,
                   help="server processes sharing the port (default: PINLATER_TYPEAHEAD_THRIFT_PROCESSES, 1)")
    p = sub.add_parser("lookup", help="print a user's contacts matching a query, best first")
    p.set_defaults(fn=cmd_lookup)
    p.add_argument("user_id")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=10, help=f"results (1..{MAX_LIMIT})")
    p.add_argument("--sources", metavar="A,B", help="only these contact sources (default: every source)")
    p.add_argument("--json", action="store_true", help="print the endpoint's JSON")
    p = sub.add_parser("link", help="an external account (email:..., social:...) is the user's; enqueue the fix-up "
                                    "of every import naming it")
    p.set_defaults(fn=cmd_link)
    p.add_argument("account")
    p.add_argument("user_id")
    p = sub.add_parser("unlink", help="an external account is nobody's; enqueue the fix-up of every import naming it")
    p.set_defaults(fn=cmd_unlink)
    p.add_argument("account")
    p = sub.add_parser("index-importers", help="note the accounts of every stored import, so links find imports "
                                               "stored before they could (once, after upgrading; safe to repeat)")
    p.set_defaults(fn=cmd_index_importers)
    p.add_argument("--page", type=int, default=500, help="imports read at a time (1..10000)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, ERRORS)


def _not_installed(exc: BaseException, _args: argparse.Namespace) -> str | None:
    if isinstance(exc, ModuleNotFoundError) and exc.name == "tasks.typeahead.index":
        return "the contacts index (tasks.typeahead.index) is not installed yet"
    return None


ERRORS = ErrorStyle(labels=((TypeaheadUnavailable, "contacts index unavailable"),), hint=_not_installed,
                    internal_status=2)


if __name__ == "__main__":
    sys.exit(main())
