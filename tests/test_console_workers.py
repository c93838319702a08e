"""The console's Workers tab against a real `lockgate dev` (issue 50, item 10): a worker's row
(state, version, uptime, the job it runs, node), its log, and a restart after the
confirmation dialog; the new worker's row replaces the old one's."""

from __future__ import annotations

import re
import threading

import pytest
import requests
from playwright.sync_api import expect

from console_browser import PHONE, assert_clean, screenshot, sign_in
from tests.conftest import wait_until

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
    # at phone width the table scrolls in its box: the page itself does not overflow
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "workers-phone")
    assert_clean(page)


def test_template_fields_edited_from_the_endpoint_say_which_workers_restart(
    page, console_dev
) -> None:
    """Issue 50, item 10: the endpoint's Edit edits its template's image, command and env;
    the review names the workers that restart, and after Save a new worker runs the change."""
    headers = console_dev.headers()
    template = {
        "name": "tpl-edit", "imageName": "example.test/echo:1",
        "dockerStartCmd": ["python", "-u", "examples/echo/handler.py"], "env": {"GREETING": "one"},
    }  # fmt: skip
    resp = requests.post(
        f"{console_dev.url}/v1/templates", json=template, headers=headers, timeout=10
    )
    assert resp.status_code == 200, resp.text
    template_id = resp.json()["id"]
    body = {"id": "tpl-edit", "templateId": template_id, "workersMin": 1, "workersMax": 1}
    resp = requests.post(f"{console_dev.url}/v1/endpoints", json=body, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text

    def workers() -> list[dict]:
        url = f"{console_dev.url}/v2/serverless/tpl-edit/workers"
        return requests.get(url, headers=headers, timeout=10).json()["workers"]

    old = wait_until(lambda: [w["id"] for w in workers() if w["status"] == "IDLE"], "a worker")
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/tpl-edit/edit")
    card = page.get_by_role("region", name="Template: tpl-edit")
    expect(card.get_by_label("Container image")).to_have_value("example.test/echo:1")
    # a refused save lists its problem in the form's words, beside its field (formErrors)
    card.get_by_label("Variable 1 name").fill("BAD NAME")
    card.get_by_role("button", name="Review template changes").click()
    card.get_by_role("button", name="Save template").click()
    problems = card.locator(".form-errors")
    expect(problems).to_contain_text(
        "Environment variables: 'BAD NAME' is not a valid environment variable name"
    )
    expect(card.locator('[data-field="env"] .field-error')).to_have_count(1)
    card.get_by_label("Variable 1 name").fill("GREETING")
    card.get_by_label("Variable 1 value").fill("two")
    card.get_by_label("Container image").fill("example.test/echo:2")
    card.get_by_role("button", name="Review template changes").click()
    rows = card.locator("table.diff tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("imageName")
    expect(rows.nth(1)).to_contain_text("env")
    expect(rows.nth(1).locator("td.new")).to_have_text("GREETING=two")
    warning = card.locator(".workers-restart")
    expect(warning).to_contain_text(f"tpl-edit's worker {old[0]} restart")
    screenshot(page, "edit-template-review")
    card.get_by_role("button", name="Save template").click()
    expect(card.locator("p.ok")).to_contain_text("Saved template tpl-edit: imageName, env")
    saved = requests.get(
        f"{console_dev.url}/v1/templates/{template_id}", headers=headers, timeout=10
    )
    assert saved.json()["env"] == {"GREETING": "two"}
    assert saved.json()["imageName"] == "example.test/echo:2"

    def replaced() -> bool:
        now = workers()
        return bool(now) and all(w["id"] not in old and w["version"] == 2 for w in now)

    wait_until(replaced, "the worker replaced by one of version 2", timeout=60)
    assert_clean(page, allow=("400",))  # the refused save
