"""The console's Overview in Chromium against a real `lockgate dev`: a runpod-SDK worker whose
fitness check fails (tests/workers/runpod_trouble.py) shows in the Workers card, with the
check's name and reason."""

from __future__ import annotations

import sys

from console_browser import PHONE, assert_clean, screenshot
from test_console_health import call, no_horizontal_scroll, open_page, poll

pytest_plugins = ["console_fixtures"]

# This interpreter: it has the runpod SDK (a `python` on PATH may not).
TROUBLED = f"env 'TROUBLE_FITNESS=no GPU visible' {sys.executable} tests/workers/runpod_trouble.py"


def test_a_worker_failing_its_fitness_check_shows_why_in_the_workers_card(page, console_dev):
    call(console_dev, "POST", "/v1/endpoints",
         {"id": "fitful", "name": "fitful", "templateId": TROUBLED, "workersMin": 1})  # fmt: skip
    health = poll(
        lambda: (h := call(console_dev, "GET", "/v2/fitful/health")).get("unhealthyWorkers") and h,
        "a worker marked unhealthy in /health",
    )
    first = health["unhealthyWorkers"][0]
    assert (first["kind"], first["check"]) == ("fitness", "check_trouble")
    assert first["reason"] == "RuntimeError: no GPU visible"
    open_page(page, console_dev, "endpoints/fitful")
    table = page.get_by_role("table", name="Marked unhealthy in the last hour")
    table.wait_for()
    row = table.locator(f'tr[data-worker="{first["id"]}"]')
    text = row.inner_text()
    assert "fitness check check_trouble" in text and "RuntimeError: no GPU visible" in text
    screenshot(page, "overview-fitness-check-failed")
    page.set_viewport_size(PHONE)
    table.wait_for()
    no_horizontal_scroll(page)
    screenshot(page, "overview-fitness-check-failed-phone")
    assert_clean(page)
    call(console_dev, "DELETE", "/v1/endpoints/fitful")
