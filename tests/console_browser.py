"""Helpers for the console's browser tests (fixtures: tests/console_fixtures.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import requests

from devproc import REPO, DevProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
REQUIRE_ENV = "LOCKGATE_REQUIRE_BROWSER"
ARTIFACTS = Path(os.environ.get("LOCKGATE_ARTIFACTS", REPO / "test-artifacts")) / "console"
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def screenshot(tab, name: str) -> Path:
    """Save a full-page screenshot as a test artefact; the path is returned."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    return path


# Chromium aborts requests in flight with net::ERR_NETWORK_CHANGED when it sees this
# machine's network change, and the real node's tests, running beside the browser tests,
# change it (its bridge, routes and pod interfaces come and go). Seen in CI: a page whose
# scripts failed that way stayed blank (no sign-in form), and the failed loads were logged
# as console errors. Such a failure is the host's, not the console's: a watched tab loads
# the page again, `assert_clean` leaves it out, and the console's own reads retry (api.js).
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"


class Served(Protocol):
    """Whatever serves the console: `lockgate dev`, or `lockgate manage` on a cluster."""

    url: str


def sign_in(tab, dev: DevProcess | Served, key: str | None = None) -> None:
    """Open the console `dev` serves and sign in with `key` (default: `lockgate dev`'s API
    key, so a `Served` console needs one). A load the
    host's network change aborted is done again by the tab itself (`watched_tab`); the page
    is also loaded again (at most twice) when the form is not there within 15 s, and what
    the page held is printed, so a run says what happened; a console that never shows the
    form still fails."""
    field = tab.get_by_label("Admin API key")
    for attempt in range(3):
        tab.goto(f"{dev.url}/console/")
        try:
            field.wait_for(timeout=15_000)
            break
        except Exception as err:  # playwright's TimeoutError
            print(f"sign_in: no form after 15 s (load {attempt + 1}): {err}; "
                  f"page: {tab.content()[:800]!r}; problems: {tab.problems}")  # fmt: skip
    field.fill(key if key is not None else dev.key)  # type: ignore[union-attr]
    tab.get_by_role("button", name="Sign in").click()


def assert_clean(tab, *, allow: tuple[str, ...] = ()) -> None:
    """No console error or page error, apart from those containing an `allow` text (an
    API's expected 4xx answer is logged by the browser as a failed resource load) and
    loads the host's network change aborted (`NETWORK_CHANGED`)."""
    left = [p for p in tab.problems if not any(a in p for a in (*allow, NETWORK_CHANGED))]
    assert not left, left


def create_endpoint(dev: DevProcess, endpoint_id: str, **spec) -> None:
    """Create an endpoint through the management API, as a person would in the console."""
    r = requests.post(
        f"{dev.url}/v1/endpoints",
        json={"id": endpoint_id, **spec},
        headers=dev.headers(),
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text


def create_key(dev: DevProcess, name: str, scopes: list[str]) -> str:
    """A new API key through `/v1/keys`."""
    r = requests.post(
        f"{dev.url}/v1/keys",
        json={"name": name, "scopes": scopes},
        headers=dev.headers(),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return r.json()["key"]


def _again_on_network_change(navigate, problems: list[str]):
    """`navigate` (a tab's goto or reload), done again (at most twice) when it, or a load
    of the page, failed with `NETWORK_CHANGED`: the navigation itself raises (seen in CI:
    `Page.goto: net::ERR_NETWORK_CHANGED`), or the page's scripts may be missing, and a
    blank page would fail the test for the host's sake, not the console's."""

    from playwright.sync_api import Error as PlaywrightError  # here: playwright may be absent

    def again(*args, **kwargs):
        for _ in range(2):
            seen = len(problems)
            try:
                answer = navigate(*args, **kwargs)
            except PlaywrightError as e:
                if NETWORK_CHANGED not in str(e):
                    raise
                continue
            if not any(NETWORK_CHANGED in p for p in problems[seen:]):
                return answer
        return navigate(*args, **kwargs)

    return again


def watched_tab(browser, **context_options) -> Iterator:
    """A fresh browser context (1280 px wide unless `context_options` say otherwise) and
    page; `page.problems` collects console errors and uncaught exceptions (a CSP violation
    is one), which `assert_clean` checks. Closed when the generator is."""
    context = browser.new_context(**{"viewport": DESKTOP, **context_options})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    tab.problems = problems
    tab.goto, tab.reload = (
        _again_on_network_change(tab.goto, problems),
        _again_on_network_change(tab.reload, problems),
    )
    yield tab
    context.close()
