"""Helpers of the search-page tests: a page on a typeahead server (checked on
close for foreign requests and JavaScript errors), typing key by key, and
the rows it shows next to the rows the endpoint answers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tasks.typeahead.http import TypeaheadServer
from tests.http_client import request
from tests.support.waits import wait_for

Row = tuple[str, str, str]  # name, source, the "also in" text


@dataclass
class Page:
    tab: Any  # Playwright's page
    aborted: list[str] = field(default_factory=list)  # requests the page gave up (stale searches)


@contextlib.contextmanager
def open_page(browser_context: Any, server: TypeaheadServer, owner: int) -> Iterator[Page]:
    tab = browser_context.new_page()
    page = Page(tab)
    requests: list[str] = []
    errors: list[str] = []
    tab.on("request", lambda r: requests.append(r.url))
    tab.on("requestfailed", lambda r: page.aborted.append(r.url))
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto(server.url + "/")
    tab.fill("#user", str(owner))
    yield page
    tab.close()
    outside = [u for u in requests if not u.startswith(server.url + "/") and not u.startswith("data:")]
    assert not outside, f"the page fetched from elsewhere: {outside}"
    assert not errors, f"JavaScript errors: {errors}"


def api_rows(server: TypeaheadServer, owner: int, query: str) -> list[Row]:
    """The endpoint's answer (the page's limit, 10) as the page should show it."""
    status, answer, _ = request(server, f"/v1/typeahead/{owner}?q={quote(query)}&limit=10")
    assert status == 200, answer
    rows = []
    for r in answer["results"]:
        others = [s for s in r["sources"] if s != r["source"]]
        rows.append((r["name"], r["source"], f"also in: {', '.join(others)}" if others else ""))
    return rows


def shown_rows(page: Page) -> list[Row]:
    rows = page.tab.eval_on_selector_all("#results li", """items => items.map(li => [
        li.querySelector('.name').textContent, li.querySelector('.source').textContent,
        li.querySelector('.also') ? li.querySelector('.also').textContent : ''])""")
    return [tuple(row) for row in rows]



def type_slowly(page: Page, text: str) -> None:
    """Key by key, slower than the page's debounce, so each key sends a request."""
    page.tab.fill("#q", "")
    page.tab.locator("#q").press_sequentially(text, delay=120)


def type_and_wait(page: Page, server: TypeaheadServer, owner: int, query: str) -> list[Row]:
    """Type ``query``; wait until the page shows the endpoint's answer to it; return that."""
    type_slowly(page, query)
    expected = api_rows(server, owner, query)
    wait_for(lambda: shown_rows(page) == expected, f"the results of {query!r}")
    return expected
