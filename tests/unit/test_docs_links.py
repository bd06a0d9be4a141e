"""The documentation's links lead somewhere: every relative markdown link in
the README, the changelog and docs/ names a file of this repository, and
every ``#anchor`` a heading of its target. No servers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "workers" / "README.md", *(REPO / "docs").glob("*.md")]
)

# [text](target) and ![alt](target); a target ends at whitespace or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
# References to design notes that live outside the repository.
OUTSIDE = re.compile(r"\.\./shared|shared/|DESIGN\.md|hbase-notes|pinlater-wire\.md|celery-transport-notes|\bseed 00\d")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a link there is code)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return "\n".join(kept)


def links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken(page: Path, target: str) -> str | None:
    """Why ``target``, linked from ``page``, leads nowhere; None if it is fine."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
        return None
    path_part, _, anchor = target.partition("#")
    dest = (page.parent / path_part).resolve() if path_part else page
    if not dest.is_relative_to(REPO):
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(REPO)}"
    return None


def test_the_pages_exist_and_have_links() -> None:
    # The checks below would pass vacuously if the pages or the pattern drifted.
    assert (REPO / "README.md") in PAGES and len(PAGES) >= 8
    assert sum(len(links(page)) for page in PAGES) >= 30


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    problems = [f"{target}: {why}" for target in links(page) if (why := broken(page, target))]
    assert not problems, f"{page.relative_to(REPO)}: " + "; ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_points_at_notes_outside_the_repository(page: Path) -> None:
    hits = [line.strip() for line in page.read_text(encoding="utf-8").splitlines() if OUTSIDE.search(line)]
    assert not hits, f"{page.relative_to(REPO)} refers to notes outside the repository: {hits}"


def test_the_checks_catch_what_they_are_for() -> None:
    assert slug(" Layout versions and `pinlater migrate`") == "layout-versions-and-pinlater-migrate"
    assert slug("Checked: any order, against the truth") == "checked-any-order-against-the-truth"
    readme = REPO / "README.md"
    assert broken(readme, "docs/no-such-page.md") == "no such file"
    assert broken(readme, "../outside.md") == "points outside the repository"
    assert broken(readme, "docs/storage.md#no-such-heading") is not None
    assert broken(readme, "https://example.com/x") is None
    assert OUTSIDE.search("see ../shared/DESIGN.md") and OUTSIDE.search("(seed 002)")
    assert not OUTSIDE.search("the feed paper")
