"""Every feed and typeahead index equals its truth, whatever order the jobs
run in (``tests.consistency.model``), over Redis in the process, through a
``pinlater server``, and with the typeahead's updates through a Contacts
Service.

``PINLATER_CONSISTENCY_EXAMPLES`` (per backend, a third of it through the
Contacts Service; unset, 60, and 30 through the server) and
``PINLATER_CONSISTENCY_STEPS`` (50 rules per example) size it. A failure
prints its shrunk rules and the seed that replays the run
(``pytest --hypothesis-seed=N``); ``make soak`` runs many more examples.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair
from tests.consistency.model import Model
from tests.consistency.rig import rig

ASKED = os.environ.get("PINLATER_CONSISTENCY_EXAMPLES")
EXAMPLES = int(ASKED or "60")
STEPS = int(os.environ.get("PINLATER_CONSISTENCY_STEPS", "50"))
# Small enough that a few actions cross every limit: fan-out pages of 2
# followers, follows that bring 2 pins, rename pages of 2, account fix-ups
# of 1 import a page, second_degree pages of 1 follower, counting 2
# followees' 2 newest follows and keeping 2.
FEED_ENV = {
    "PINLATER_FEED_PAGE_SIZE": "2",
    "PINLATER_FEED_RECENT_PINS": "2",
    "PINLATER_TYPEAHEAD_RENAME_PAGE": "2",
    "PINLATER_TYPEAHEAD_ACCOUNT_PAGE": "1",
    "PINLATER_TYPEAHEAD_SECOND_PAGE": "1",
    "PINLATER_TYPEAHEAD_SECOND_FOLLOWEES": "2",
    "PINLATER_TYPEAHEAD_SECOND_PER_FOLLOWEE": "2",
    "PINLATER_TYPEAHEAD_SECOND_CAP": "2",
}


def examples_of(backend: str) -> int:
    """Through the Contacts Service each of its calls is one step (its
    stores' calls run on the server's threads), so its schedules are
    coarser: a third of the examples. Through the server the model and its
    schedules are those over Redis, each call crossing the wire, and an
    example costs 1.4 times one over Redis: by default (``make test``,
    whose time is bounded) half; ``make soak`` asks for the same count."""
    if backend.endswith("+contacts"):
        return max(10, EXAMPLES // 3)
    if backend.endswith("+thrift") and ASKED is None:
        return EXAMPLES // 2
    return EXAMPLES


# Each backend is a group of its own: the two longest tests of the suite run
# side by side under pytest-xdist. An example takes about 1.6 s on an idle
# machine and 4-8 s beside the rest of `make test` on 2 busy cores; the
# timeout, there to stop a hang and not to time the model, grows with the
# examples asked for.
@pytest.mark.timeout(max(300, 12 * EXAMPLES))
@pytest.mark.parametrize("backend", [
    pytest.param(backend, marks=pytest.mark.xdist_group(f"consistency-{backend}"))
    for backend in ("redis", "redis+thrift", "redis+contacts")
])
def test_every_feed_and_index_equals_its_truth_under_any_schedule(
    backend: str, servers: None, appdata: AppData, pair: ClusterPair, request: pytest.FixtureRequest
) -> None:
    address = None
    if backend.endswith("+thrift"):
        server: Callable[[str], str] = request.getfixturevalue("thrift_server")
        address = server("redis")
    with rig(backend, appdata, pair, address, FEED_ENV) as world:
        Model.rig = world
        config = settings(
            max_examples=examples_of(backend),
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        run_state_machine_as_test(Model, settings=config)
        if world.contacts_service is not None:  # the typeahead's updates did go through it
            methods = world.contacts_service.stats.snapshot()["methods"]
            assert isinstance(methods, dict) and {"followChanged", "renamePage"} <= methods.keys(), methods
