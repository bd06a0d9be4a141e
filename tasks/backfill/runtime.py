"""What the backfill tasks keep of their own in a process, over the
process's ``TaskRuntime``: a ``BackfillContext`` on its app-data store and
HBase pair (with the tables the kinds ensured), and the run records."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.backfill.kinds import BackfillContext
from tasks.backfill.records import Records
from tasks.runtime import TaskRuntime, current


@dataclass
class BackfillRuntime:
    ctx: BackfillContext
    records: Records

    @classmethod
    def on(cls, shared: TaskRuntime) -> BackfillRuntime:
        """The backfill tasks' view of ``shared`` (kinds read their settings
        from its environment)."""
        return cls(BackfillContext(shared.store, shared.pair, shared.env), Records(shared.store))


def runtime(shared: TaskRuntime | None = None) -> BackfillRuntime:
    """The backfill tasks' view of ``shared``, by default this process's runtime."""
    return (current() if shared is None else shared).view(BackfillRuntime.on)
