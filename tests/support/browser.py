"""A real browser for the console's tests: Debian's chromium driven by Playwright (no browser download).

    with chromium() as browser:
        page = browser.new_context().new_page()

Without /usr/bin/chromium the test is skipped, or fails under `TOOLGATE_REQUIRE_CHROMIUM=1`
(set by `.ci/run`, which installs it). `TOOLGATE_CONSOLE_SCREENSHOTS=<folder>` makes `screenshot`
write the console's views there (docs/console/ holds the committed ones); otherwise it writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")


def require() -> Path:
    """The chromium binary; else skip, or fail under `TOOLGATE_REQUIRE_CHROMIUM=1`."""
    if CHROMIUM.exists():
        return CHROMIUM
    message = "needs Debian's chromium (`apt-get install chromium chromium-driver`, what .ci/run does)"
    if os.environ.get("TOOLGATE_REQUIRE_CHROMIUM") == "1":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless chromium for the test's duration."""
    binary = require()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(binary), headless=True)
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> None:
    """Save a screenshot of the page as `<name>.png` when `TOOLGATE_CONSOLE_SCREENSHOTS` names a folder."""
    folder = os.environ.get("TOOLGATE_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))
