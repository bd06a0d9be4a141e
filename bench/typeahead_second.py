"""The second_degree parts of bench/typeahead.py's lookups and report: the
names a user might type of their second_degree contacts, whether an answer
showed one, and the line of the second_degree backfill (which runs in the
backfill's processes: ``typeahead_backfill.second_backfill``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tasks.appdata.store import AppData
from tasks.typeahead import second
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import SECOND_DEGREE


def second_names(store: AppData, owners: Sequence[int]) -> dict[int, list[str]]:
    """The names of each owner's second_degree contacts, as MySQL has them
    (what the backfill wrote); owners without any are left out."""
    listed = second.truth(store, owners, second.Limits.of(TypeaheadSettings.from_env()))
    return {owner: [name for _i, _n, name in items] for owner, items in listed.items() if items}


def shows_second(sources_of_matches: Iterable[Sequence[str]]) -> bool:
    """Whether an answer has a match found in second_degree (by any of its sources)."""
    return any(SECOND_DEGREE.name in sources for sources in sources_of_matches)


def report_second_backfill(sd: dict[str, Any]) -> None:
    print(f"second_degree backfill (sync.rebuild_second, primary cluster only): {sd['users']:,} users in "
          f"{sd['pages']} pages of {sd['page_size']}, {sd['processes']} processes: {sd['seconds']:.1f} s, "
          f"{sd['users_per_s']:,.0f} users/s; {sd['cells_per_user']:.1f} cells and {sd['listed_per_user']:.1f} "
          f"listed a user ({sd['users_listed']:,} users with a list, cap {sd['limits']['cap']})")
