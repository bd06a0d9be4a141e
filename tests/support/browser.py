"""Headless Chromium through Playwright for the browser tests (a pytest
plugin of the root conftest). Chromium comes with ``scripts/services up``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import REPO, ensure_services

ARTIFACTS = REPO / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


# One per test process: a second sync Playwright started while the first is
# open fails ("Sync API inside the asyncio loop"), so every directory's
# browser tests share this one.
@pytest.fixture(scope="session")
def browser_context(servers: None) -> Iterator[Any]:
    """Debian's Chromium through Playwright, with a new empty profile."""
    ensure_services()  # installs Chromium
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/services up (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pl-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        context.set_default_timeout(15_000)
        yield context
        context.close()
