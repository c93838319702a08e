"""Browser-test fixtures for the web console: Debian's Chromium driven by Playwright, against
a real `lockgate dev`. Load with `pytest_plugins = ["console_fixtures"]`; helpers
(sign_in, screenshot, assert_clean) are in tests/console_browser.py.

Without Chromium (`make browser`) or Playwright the tests skip, unless
LOCKGATE_REQUIRE_BROWSER=1 (CI) makes that a failure. Screenshots go to
$LOCKGATE_ARTIFACTS/console (default: test-artifacts/console in the repository).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from console_browser import CHROMIUM, CHROMIUM_ARGS, REQUIRE_ENV, watched_tab
from devproc import DevProcess


def _missing(message: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Headless Chromium for one module. Not for the session: Playwright's sync API keeps an
    event loop running in the main thread while it is open, and pytest-asyncio's tests of
    later modules could not run theirs."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        _missing("chromium is not installed (make browser)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def console_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with the echo handler; `.url` serves the console at /console/."""
    data_dir = tmp_path_factory.mktemp("console-dev")
    dev = DevProcess("examples/echo/handler.py", data_dir=data_dir).start()
    yield dev
    dev.stop()


@pytest.fixture
def page(browser) -> Iterator:
    """A fresh browser context and page, see `watched_tab`."""
    yield from watched_tab(browser)
