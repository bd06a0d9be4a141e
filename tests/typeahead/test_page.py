"""The search page in headless Chromium over an in-process index: typing
shows the endpoint's answer for the newest text, in its order (stale
answers, made slower on purpose, are aborted or dropped), arrow keys move
the highlight, errors show inline, names are text, and the page fetches
nothing from anywhere but its server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tasks.typeahead.http import TypeaheadServer
from tests.http_client import request
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
def page(browser_context: Any, slow_server: TypeaheadServer) -> Iterator[Any]:
    page = browser_context.new_page()
    requests: list[str] = []
    aborted: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: aborted.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(slow_server.url + "/")
    page.fill("#user", str(OWNER))
    page.aborted = aborted
    yield page
    page.close()
    outside = [u for u in requests if not u.startswith(slow_server.url + "/") and not u.startswith("data:")]
    assert not outside, f"the page fetched from elsewhere: {outside}"
    assert not errors, f"JavaScript errors: {errors}"


def api_rows(server: TypeaheadServer, query: str) -> list[tuple[str, str, str]]:
    """(name, source, "also in" text) of the endpoint's answer, as the page should show it."""
    status, answer, _ = request(server, f"/v1/typeahead/{OWNER}?q={quote(query)}&limit=10")
    assert status == 200
    rows = []
    for r in answer["results"]:
        others = [s for s in r["sources"] if s != r["source"]]
        rows.append((r["name"], r["source"], f"also in: {', '.join(others)}" if others else ""))
    return rows


def shown_rows(page: Any) -> list[tuple[str, str, str]]:
    rows = page.eval_on_selector_all("#results li", """items => items.map(li => [
        li.querySelector('.name').textContent, li.querySelector('.source').textContent,
        li.querySelector('.also') ? li.querySelector('.also').textContent : ''])""")
    return [tuple(row) for row in rows]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def type_slowly(page: Any, text: str) -> None:
    """Key by key, slower than the debounce, so each key sends a request."""
    page.fill("#q", "")
    page.locator("#q").press_sequentially(text, delay=120)


def test_typing_shows_the_newest_answer_in_order(page: Any, slow_server: TypeaheadServer) -> None:
    type_slowly(page, "jo")
    expected = api_rows(slow_server, "jo")
    assert len(expected) == 10  # the page's limit
    wait_for(lambda: shown_rows(page) == expected, "the results of 'jo'")

    type_slowly(page, "john s")
    expected = api_rows(slow_server, "john s")
    assert [row[0] for row in expected][:3] == ["John Michael Smith", "John Smith", "Smith John"]
    assert expected[1][2] == "also in: facebook"
    wait_for(lambda: shown_rows(page) == expected, "the results of 'john s'")
    time.sleep(LAST_ANSWER_S + 0.3)  # every stale answer has come back by now
    assert shown_rows(page) == expected
    assert page.aborted, "stale requests were not aborted"
    assert page.inner_text("#error") == "" and page.is_hidden("#error")


def test_arrow_keys_move_the_highlight(page: Any, slow_server: TypeaheadServer) -> None:
    type_slowly(page, "john s")
    wait_for(lambda: shown_rows(page) == api_rows(slow_server, "john s"), "results")
    selected = "() => Array.from(document.querySelectorAll('#results li')).findIndex(li => li.ariaSelected === 'true')"
    page.press("#q", "ArrowDown")
    page.press("#q", "ArrowDown")
    assert page.evaluate(selected) == 1
    page.press("#q", "ArrowUp")
    assert page.evaluate(selected) == 0
    assert page.get_attribute("#q", "aria-activedescendant") == "result-0"


def test_names_are_shown_as_text(page: Any, slow_server: TypeaheadServer) -> None:
    type_slowly(page, "johns")
    wait_for(lambda: shown_rows(page) == api_rows(slow_server, "johns"), "results")
    assert shown_rows(page)[0][0] == "<img src=x onerror=alert(1)> Johnson"
    assert page.locator("#results img").count() == 0


@pytest.mark.parametrize(("user", "says"), [
    ("abc", "user id must be a decimal number"),
    (str(DOWN_OWNER), f"contacts index unavailable: {DOWN_CAUSE}"),
    ("", "Enter a user id first."),
])
def test_errors_show_inline(page: Any, user: str, says: str) -> None:
    page.fill("#user", user)
    type_slowly(page, "jo")
    wait_for(lambda: says in page.inner_text("#error"), f"the error {says!r}")
    assert page.locator("#results li").count() == 0
    page.fill("#user", str(OWNER))  # fixing the user id searches again
    wait_for(lambda: page.locator("#results li").count() > 0 and page.is_hidden("#error"), "results again")
