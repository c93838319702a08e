"""The console in a crash loop (issue 47 item 4), in Chromium against a real `lockgate dev`:
after `crashLoopThreshold` failed starts the Overview says no worker starts, with the exit
code and last line, and its Restart workers button clears the state."""

from __future__ import annotations

import re

import pytest
import requests

from console_browser import assert_clean, create_endpoint, screenshot, sign_in
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]


def phase(console_dev, endpoint_id: str) -> str:
    record = requests.get(
        f"{console_dev.url}/v1/endpoints/{endpoint_id}", headers=console_dev.headers(), timeout=30
    ).json()
    return record["status"]["phase"]


@pytest.fixture(scope="module")
def looping(console_dev):
    """An endpoint whose handler raises at import, stopped after two failed starts."""
    create_endpoint(
        console_dev, "looping", templateId="tests/handlers/import_error.py", workersMax=1,
        crashLoopThreshold=2,
    )  # fmt: skip
    queued = requests.post(
        f"{console_dev.url}/v2/looping/run", json={"input": {}},
        headers=console_dev.headers(), timeout=30,
    )  # fmt: skip
    assert queued.status_code == 200, queued.text
    wait_until(lambda: phase(console_dev, "looping") == "CrashLoop", "phase CrashLoop", 90)
    yield "looping"
    requests.delete(
        f"{console_dev.url}/v1/endpoints/looping", headers=console_dev.headers(), timeout=30
    )


def test_the_overview_says_no_worker_starts_and_restarts_them(page, console_dev, looping):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    badge = page.locator(f'tr[data-endpoint="{looping}"] .badge').first
    badge.wait_for()
    wait_until(lambda: badge.inner_text() == "Crash loop", "the list's Crash loop badge")

    page.goto(f"{console_dev.url}/console/#/endpoints/{looping}")
    card = page.locator(".crash-loop")
    card.wait_for()
    card.locator(".crash-facts").wait_for()  # /health's crashLoop
    text = card.inner_text()
    assert "No worker starts: workers crash at start" in text
    assert "exit code 1" in text and "RuntimeError: broken at import on purpose" in text
    assert page.locator("#summary .badge").inner_text() == "Crash loop"
    condition = page.locator("#conditions + .table-wrap tbody tr", has_text="WorkersCrashAtStart")
    assert condition.locator(".badge.bad").inner_text() == "True"
    screenshot(page, "overview-crash-loop-stopped")

    page.get_by_role("button", name="Restart workers").click()
    page.get_by_role("status").filter(has_text="Restart asked").wait_for()
    assert phase(console_dev, looping) != "CrashLoop"
    card.wait_for(state="detached", timeout=15_000)
    assert_clean(page)


def test_a_healthy_endpoints_crash_loop_condition_is_no_problem(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{console_dev.endpoint}")
    page.locator("#summary .badge").wait_for()
    wait_until(lambda: page.locator("#conditions").count() == 1, "the conditions table")
    first = page.locator("td:first-child", has_text=re.compile("^CrashLoop$"))
    row = page.locator("#conditions + .table-wrap tbody tr").filter(has=first)
    assert row.locator(".badge").inner_text() == "False"
    assert "ok" in row.locator(".badge").get_attribute("class")
    assert page.locator(".problem", has_text="CrashLoop").count() == 0
    assert_clean(page)
