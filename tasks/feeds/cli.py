"""``pinlater-feeds``: serve, read and sweep following feeds.

    pinlater-feeds serve [--host H] [--port P]    the JSON endpoint (tasks.feeds.http)
    pinlater-feeds read USER_ID [--limit N] [--cursor C] [--json]
    pinlater-feeds sweep                          enqueue a trim sweep of both clusters

Settings come from the environment: PINLATER_FEED_* (``tasks.feeds.settings``;
``serve`` listens on PINLATER_FEED_HTTP), PINLATER_APPDATA_*, PINLATER_HBASE_*
and, for ``sweep``, the PINLATER_* of the job service. Exit status: 0 done,
2 refused (bad input or setting, a server down, no cluster answered), 1 an
internal error; an error is one line on stderr, never a traceback (unless -v).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from pinlater.kit import cli_runner
from pinlater.kit.cli_output import one_line
from pinlater.kit.cli_runner import ErrorStyle, add_serve_command, command_parser, run
from pinlater.kit.httplimits import http_limits
from pinlater.kit.httpserver import http_tls
from tasks.appdata.errors import AppDataError
from tasks.appdata.store import AppData
from tasks.feeds.http import FeedServer, page_json
from tasks.feeds.read import FeedPage, FeedReader, FeedUnavailable
from tasks.feeds.settings import FeedSettings
from tasks.hbase import ClusterPair, HBaseError
from tasks.httpserve import parse_user_id

# The caller's or the environment's fault: exit 2 (anything else is our bug: 1).
ERRORS = ErrorStyle(
    refused=(ValueError, AppDataError, HBaseError, OSError), labels=((FeedUnavailable, "feed unavailable"),)
)


@contextlib.contextmanager
def _reader(settings: FeedSettings, *, threads: int, shadow: bool) -> Iterator[FeedReader]:
    """A reader over the environment's app data and clusters, all closed after."""
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(AppData.from_env())
        pair = ClusterPair.from_settings()
        stack.callback(pair.close)
        reader = FeedReader(pair, store, settings.read_cutoff_ms / 1000,
                            settings.shadow_share if shadow else 0.0, threads=threads)
        stack.callback(reader.close)
        yield reader


def cmd_serve(args: argparse.Namespace) -> int:
    from workers.gc_policy import tune_gc  # imported to serve only, as the typeahead's servers do

    settings = FeedSettings.from_env()
    host, port = cli_runner.listen_address(args, settings.http.host, settings.http.port)
    limits = http_limits()
    # Each request runs at most two reads at a time (primary, then the standby).
    with _reader(settings, threads=2 * limits.max_connections, shadow=True) as reader:
        tune_gc()  # a process serving reads: no full collection of what it started with stops them all
        cli_runner.serve_until_signal("pinlater-feeds", host, port,
                                      lambda h, p: FeedServer(reader, h, p, limits=limits, tls=http_tls()))
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    user_id = parse_user_id(args.user_id)
    settings = FeedSettings.from_env()
    with _reader(settings, threads=2, shadow=False) as reader:  # a one-off read warms no cache
        page = reader.read(user_id, args.cursor, args.limit)
    if args.json:
        print(json.dumps(page_json(user_id, page), indent=2))
    else:
        _print_page(page)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from pinlater import connect
    from pinlater.settings import Settings
    from tasks.feeds.actions import FeedActions

    settings = FeedSettings.from_env()
    with AppData.from_env() as store, connect(Settings.from_env(), source="pinlater-feeds") as client:
        descriptor = FeedActions(store, client, settings).start_sweep()
    print(f"trim sweep enqueued: {descriptor}")
    return 0


def _print_page(page: FeedPage) -> None:
    for pin in page.pins:
        created = datetime.fromtimestamp(pin.created_at_ms / 1000, UTC).isoformat(timespec="milliseconds")
        title = pin.data.get("title")
        # Titles are user input: one line, no terminal control characters.
        shown = one_line("".join(c if c.isprintable() else " " for c in title), 200) if isinstance(title, str) else ""
        print(f"{pin.id}  {created.replace('+00:00', 'Z')}  {shown}".rstrip())
    print(f"next cursor: {page.next_cursor or '(end of feed)'}")
    print(f"served by: {page.served_by}")


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command_parser("pinlater-feeds", "Serve, read and sweep following feeds.")
    add_serve_command(sub, "serve the JSON read endpoint until SIGTERM or SIGINT", cmd_serve, "PINLATER_FEED_HTTP")
    p = sub.add_parser("read", help="print a page of a user's feed, newest first")
    p.set_defaults(fn=cmd_read)
    p.add_argument("user_id")
    p.add_argument("--limit", type=int, default=50, help="pins per page (1..500)")
    p.add_argument("--cursor", help="next cursor of the previous page")
    p.add_argument("--json", action="store_true", help="print the endpoint's JSON")
    p = sub.add_parser("sweep", help="enqueue a trim sweep of both clusters on PinLater")
    p.set_defaults(fn=cmd_sweep)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, ERRORS)


if __name__ == "__main__":
    sys.exit(main())
