"""The typeahead's backfill kinds (``tasks.backfill``): "contacts", the
index of a page of users rebuilt from MySQL, compared, and repaired,
through the plain functions of ``tasks.typeahead.sync`` and ``verify``;
and "second_degree", their second_degree contacts
(``tasks.typeahead.second``), filled apart because they cost more (each
owner's followees' follows). A rebuild goes
through the Contacts Service when the jobs' updates do
(``PINLATER_TYPEAHEAD_SERVICE``); a verify's diff and repair read and
delete cells the service has no call for, so they run here. The app's
manifest (``tasks.typeahead.app``) names it."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.backfill.kinds import BackfillContext, Difference
from tasks.hbase import ClusterPool
from tasks.typeahead import second, sync, verify
from tasks.typeahead.runtime import runtime
from tasks.typeahead.tables import TYPEAHEAD_SECOND, TYPEAHEAD_TALL, TYPEAHEAD_WIDE


def _pool(ctx: BackfillContext, cluster: str) -> ClusterPool:
    ctx.ready(cluster, TYPEAHEAD_TALL)
    return ctx.ready(cluster, TYPEAHEAD_WIDE)


class ContactsKind:
    name = "contacts"

    def backfill(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> int:
        if not user_ids:
            return 0
        rt = runtime()
        if rt.settings.service is not None:
            return rt.updates.rebuild(cluster, user_ids)
        return sync.rebuild(ctx.store, _pool(ctx, cluster), user_ids)

    def diff(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> list[Difference]:
        found = verify.diff(ctx.store, _pool(ctx, cluster), user_ids)
        return [Difference(d.owner, f"{d.source} {d.key}: {d.problem}", d) for d in found]

    def repair(self, ctx: BackfillContext, cluster: str, diffs: Sequence[Difference], round_no: int) -> int:
        payloads = [d.payload for d in diffs if isinstance(d.payload, verify.ContactDifference)]
        return verify.repair(ctx.store, _pool(ctx, cluster), payloads)


CONTACTS = ContactsKind()


class SecondDegreeKind:
    name = "second_degree"

    def backfill(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> int:
        if not user_ids:
            return 0
        rt = runtime()
        if rt.settings.service is not None:
            return rt.updates.rebuild_second(cluster, user_ids)
        return sync.rebuild_second(ctx.store, ctx.ready(cluster, TYPEAHEAD_SECOND), user_ids,
                                   second.Limits.of(rt.settings))

    def diff(self, ctx: BackfillContext, cluster: str, user_ids: Sequence[int]) -> list[Difference]:
        found = second.differences(ctx.store, ctx.ready(cluster, TYPEAHEAD_SECOND), user_ids,
                                   second.Limits.of(runtime().settings))
        return [Difference(owner, problem, owner) for owner, problem in found.items()]

    def repair(self, ctx: BackfillContext, cluster: str, diffs: Sequence[Difference], round_no: int) -> int:
        return sync.rebuild_second(ctx.store, ctx.ready(cluster, TYPEAHEAD_SECOND), [d.user_id for d in diffs],
                                   second.Limits.of(runtime().settings))


SECOND_DEGREE = SecondDegreeKind()
