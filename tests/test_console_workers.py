"""The console's Workers tab against a real `lockgate dev` (issue 50, item 10): a worker's row
(state, version, uptime, the job it runs, node), its log, and a restart after the
confirmation dialog; the new worker's row replaces the old one's."""

from __future__ import annotations

import re
import threading

import pytest
import requests
from playwright.sync_api import expect

from console_browser import assert_clean, screenshot, sign_in

pytest_plugins = ["console_fixtures"]

ENDPOINT = "console-workers"


@pytest.fixture(scope="module")
def one_worker(console_dev) -> str:
    """An endpoint with one worker that prints numbered lines and sleeps as asked."""
    body = {
        "id": ENDPOINT, "templateId": "tests/workers/numbered_lines.py",
        "workersMin": 1, "workersMax": 1, "idleTimeout": 300,
    }  # fmt: skip
    resp = requests.post(
        f"{console_dev.url}/v1/endpoints", json=body, headers=console_dev.headers(), timeout=10
    )
    assert resp.status_code == 200, resp.text
    return ENDPOINT


def run(dev, payload: dict) -> dict:
    resp = requests.post(
        f"{dev.url}/v2/{ENDPOINT}/runsync?wait=60000",
        json={"input": payload}, headers=dev.headers(), timeout=70,
    )  # fmt: skip
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_workers_tab_row_log_and_restart(page, console_dev, one_worker) -> None:
    run(console_dev, {"lines": 2, "tag": "warm"})  # the worker is up and polling
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{one_worker}/workers")
    table = page.get_by_role("table", name="Workers")
    row = table.locator("tbody tr")
    expect(row).to_have_count(1)
    worker = row.get_attribute("data-worker")
    assert worker and worker.startswith(f"{ENDPOINT}-")
    expect(row.locator("td").nth(1)).to_have_text("IDLE")
    expect(row.locator("td").nth(2)).to_have_text("v1")
    assert row.locator("td").nth(6).inner_text() not in ("", "—")  # the node: this machine

    # a job in hand shows in the row, with its id (a link to its log lines)
    holder = threading.Thread(
        target=run, args=(console_dev, {"lines": 1, "tag": "held", "sleep": 4})
    )
    holder.start()
    try:
        expect(row.locator("td").nth(1)).to_have_text("RUNNING", timeout=20_000)
        expect(row.locator("td").nth(4).get_by_role("link")).to_have_count(1, timeout=20_000)
        screenshot(page, "workers")
    finally:
        holder.join(70)

    # its log: the lines it wrote, and its lifecycle
    page.get_by_role("button", name=f"Log of {worker}").click()
    log = page.get_by_role("log", name=f"Log of worker {worker}")
    log.get_by_text("held 1", exact=True).wait_for()
    assert log.locator(".log-line.system").count() >= 1  # "worker process started …"
    screenshot(page, "workers-log")

    # restart: the dialog says what happens; Cancel does nothing, the action does it
    page.get_by_role("button", name=f"Restart {worker}").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Restart worker {worker}?")
    expect(dialog).to_contain_text("A fresh worker")
    screenshot(page, "workers-restart-dialog")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(1)
    assert row.get_attribute("data-worker") == worker
    page.get_by_role("button", name=f"Restart {worker}").click()
    dialog.get_by_role("button", name="Restart worker").click()
    expect(table.locator(f'tbody tr:not([data-worker="{worker}"])')).to_have_count(
        1, timeout=30_000
    )
    expect(table.locator(f'tbody tr[data-worker="{worker}"]')).to_have_count(0, timeout=30_000)
    # the old worker's log ends with its exit
    log.get_by_text("stopping (restarted by request)", exact=False).wait_for()
    assert_clean(page)
