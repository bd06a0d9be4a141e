"""The search page in headless Chromium over an in-process index: typing
shows the endpoint's answer for the newest text, in its order (stale
answers, made slower on purpose, are aborted or dropped), arrow keys move
the highlight, errors show inline, names are text, and the page fetches
nothing from anywhere but its server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tasks.typeahead.http import TypeaheadServer
from tasks.typeahead.sources import FOLLOWING, MUTUAL, SOURCES
from tests.support.waits import wait_for
from tests.typeahead.pages import Page, open_page, shown_rows, type_and_wait, type_slowly
from tests.typeahead.support import DOWN_CAUSE, DOWN_OWNER, OWNER, FakeIndex

# Each prefix of "john s" answers later than the next one: a page that
# rendered whatever came last would end on a stale list.
SLOW = {"john s"[:n]: 0.3 * (6 - n) for n in range(1, 6)}  # longer than a key stroke (120 ms)
LAST_ANSWER_S = max(SLOW.values())


@pytest.fixture(scope="module")
def slow_server() -> Iterator[TypeaheadServer]:
    server = TypeaheadServer(FakeIndex(SLOW).lookup, "127.0.0.1", 0, request_timeout_s=5.0).start()
    yield server
    server.stop()


@pytest.fixture
def page(browser_context: Any, slow_server: TypeaheadServer) -> Iterator[Page]:
    with open_page(browser_context, slow_server, OWNER) as page:
        yield page


def test_typing_shows_the_newest_answer_in_order(page: Page, slow_server: TypeaheadServer) -> None:
    assert len(type_and_wait(page, slow_server, OWNER, "jo")) == 10  # the page's limit
    expected = type_and_wait(page, slow_server, OWNER, "john s")
    assert [row[0] for row in expected][:3] == ["John Michael Smith", "John Smith", "Smith John"]
    assert expected[1][2] == "also in: facebook"
    time.sleep(LAST_ANSWER_S + 0.3)  # every stale answer has come back by now
    assert shown_rows(page) == expected
    assert page.aborted, "stale requests were not aborted"
    assert page.tab.inner_text("#error") == "" and page.tab.is_hidden("#error")


def test_arrow_keys_move_the_highlight(page: Page, slow_server: TypeaheadServer) -> None:
    type_and_wait(page, slow_server, OWNER, "john s")
    selected = "() => Array.from(document.querySelectorAll('#results li')).findIndex(li => li.ariaSelected === 'true')"
    page.tab.press("#q", "ArrowDown")
    page.tab.press("#q", "ArrowDown")
    assert page.tab.evaluate(selected) == 1
    page.tab.press("#q", "ArrowUp")
    assert page.tab.evaluate(selected) == 0
    assert page.tab.get_attribute("#q", "aria-activedescendant") == "result-0"


def test_names_are_shown_as_text(page: Page, slow_server: TypeaheadServer) -> None:
    type_and_wait(page, slow_server, OWNER, "johns")
    assert shown_rows(page)[0][0] == "<img src=x onerror=alert(1)> Johnson"
    assert page.tab.locator("#results img").count() == 0


@pytest.mark.parametrize(("user", "says"), [
    ("abc", "user id must be a decimal number"),
    (str(DOWN_OWNER), f"contacts index unavailable: {DOWN_CAUSE}"),
    ("", "Enter a user id first."),
])
def test_errors_show_inline(page: Page, user: str, says: str) -> None:
    page.tab.fill("#user", user)
    type_slowly(page, "jo")
    wait_for(lambda: says in page.tab.inner_text("#error"), f"the error {says!r}")
    assert page.tab.locator("#results li").count() == 0
    page.tab.fill("#user", str(OWNER))  # fixing the user id searches again
    wait_for(lambda: page.tab.locator("#results li").count() > 0 and page.tab.is_hidden("#error"), "results again")


def test_the_sources_ticked_limit_the_lookup(browser_context: Any, server: TypeaheadServer,
                                             fake_index: FakeIndex) -> None:
    """Every source is a box, all ticked (no filter asked for); untick some
    and only the rest are asked for and shown; untick all and the page says so."""
    with open_page(browser_context, server, OWNER) as page:
        boxes = page.tab.eval_on_selector_all("#sources input[name=source]", "boxes => boxes.map(b => b.value)")
        assert boxes == [s.name for s in SOURCES]
        type_slowly(page, "jo")
        wait_for(lambda: page.tab.locator("#results li").count() > 0, "results")
        assert fake_index.filters[-1] is None
        for name in boxes[1:]:
            page.tab.uncheck(f"#sources input[value={name}]")
        wait_for(lambda: fake_index.filters[-1] == frozenset({MUTUAL}), "a lookup of mutual alone")
        wait_for(lambda: {row[1] for row in shown_rows(page)} == {"mutual"}, "only mutual contacts shown")
        page.tab.uncheck("#sources input[value=mutual]")
        wait_for(lambda: "Choose at least one source." in page.tab.inner_text("#error"), "the error")
        assert page.tab.locator("#results li").count() == 0
        page.tab.check("#sources input[value=following]")
        wait_for(lambda: fake_index.filters[-1] == frozenset({FOLLOWING}) and page.tab.is_hidden("#error"),
                 "following alone, the error gone")
