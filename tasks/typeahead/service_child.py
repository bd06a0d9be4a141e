"""One child process of ``pinlater-typeahead serve-thrift --processes N``
(started by ``pinlater.thrift.supervisor``, never by hand).

A Contacts Service process spends its calls in Python (reading the truth,
planning and encoding the index's cells), one core at a time; a backfill's
rebuild calls from several workers need as many processes to keep up with
those workers rebuilding in their own. Each child opens its own contacts
index, app data and HBase pair, accepts on the parent's socket while it
holds the fewest connections, and writes its HBase and MySQL call counts
for the parent's ``/metrics``; the rest is the job server's child kit.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from pinlater.observe.seam import app_store_snapshot
from pinlater.thrift.serving import ChildOptions, inherit, serve_child

MODULE = "tasks.typeahead.service_child"


@dataclass(frozen=True)
class ContactsChildOptions(ChildOptions):
    """What every child is told (the rest comes from the PINLATER_TYPEAHEAD_*
    settings, inherited with the environment)."""

    grace_s: float = 30.0
    max_concurrent_calls: int = 64
    log_level: int = logging.INFO


def main(argv: list[str] | None = None) -> int:
    # Imported here: the index and the server need HBase's client.
    from tasks import runtime as task_runtime
    from tasks.typeahead.cli import index_lookup
    from tasks.typeahead.runtime import runtime
    from tasks.typeahead.service import LAYOUT, ContactsServer, security_of
    from tasks.typeahead.settings import TypeaheadSettings
    from workers.gc_policy import tune_gc

    inherited = inherit(argv, MODULE, LAYOUT, lambda text: ContactsChildOptions.from_json(text).log_level)
    options = ContactsChildOptions.from_json(inherited.options)
    try:
        settings = TypeaheadSettings.from_env()
        security = security_of(settings.thrift_tls, settings.thrift_roles)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with index_lookup() as lookup:
            server = ContactsServer(
                lookup, writer=runtime(), security=security, insecure=settings.thrift_insecure,
                max_concurrent_calls=options.max_concurrent_calls, listener=inherited.listener,
                stats=inherited.stats(), accept_gate=inherited.accept_gate,
            )
            tune_gc()  # it runs the workers' page functions (rebuild, fix-ups), so it collects as they do
            serve_child(server, inherited, options.grace_s, app_store_snapshot)
    finally:
        task_runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
