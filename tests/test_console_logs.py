"""The console's Logs page against a real `lockgate dev`: the live tail shows a line printed
after the page opened, the worker filter, pause and resume, phone width."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from console_browser import PHONE, assert_clean, screenshot, sign_in

pytest_plugins = ["console_fixtures"]

ENDPOINT = "console-logs"


@pytest.fixture(scope="module")
def two_workers(console_dev) -> str:
    """An endpoint whose handler prints, with two workers running."""
    body = {
        "id": ENDPOINT, "templateId": "tests/handlers/printing.py",
        "workersMin": 2, "workersMax": 2,
    }  # fmt: skip
    resp = requests.post(
        f"{console_dev.url}/v1/endpoints", json=body, headers=console_dev.headers(), timeout=10
    )
    assert resp.status_code == 200, resp.text
    return ENDPOINT


def run_job(dev, word: str, **extra) -> dict:
    resp = requests.post(
        f"{dev.url}/v2/{ENDPOINT}/runsync?wait=60000",
        json={"input": {"say": word, **extra}}, headers=dev.headers(), timeout=70,
    )  # fmt: skip
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_logs_page_follows_filters_and_pauses(page, console_dev, two_workers) -> None:
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{two_workers}/logs")
    log = page.get_by_role("log", name="Worker log lines")
    log.get_by_text("printing handler loading").first.wait_for()
    page.get_by_role("status").filter(has_text="Live").wait_for()
    picker = page.get_by_label("Worker", exact=True)
    # all, and the two workers, learnt from their lines (a locator wait: a string
    # predicate would be eval'd in the page, which the console's CSP forbids)
    expect(page.locator("#log-worker option")).to_have_count(3)

    # a line printed after the page opened appears, with its job id
    job = run_job(console_dev, "after-open")
    line = log.locator(".log-line", has_text="stdout says after-open")
    line.wait_for()
    assert job["id"][:13] in line.locator(".job").inner_text()
    screenshot(page, "logs")

    # the worker filter shows one worker's lines only
    workers = [o for o in picker.locator("option").all_inner_texts() if o != "All workers"]
    picker.select_option(workers[0])
    shown = log.locator(".log-line .who").all_inner_texts()
    assert shown and all(w.startswith(workers[0]) for w in shown)
    picker.select_option("")
    assert len(log.locator(".log-line").all()) > len(shown)

    # paused: new lines wait; resumed: they show
    page.get_by_role("button", name="Pause").click()
    run_job(console_dev, "while-paused")
    page.get_by_role("status").filter(has_text="new line").wait_for()
    assert log.get_by_text("stdout says while-paused").count() == 0
    page.get_by_role("button", name="Resume").click()
    log.get_by_text("stdout says while-paused").wait_for()
    assert_clean(page)


def test_logs_page_at_phone_width(page, console_dev, two_workers) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{two_workers}/logs")
    page.get_by_role("log", name="Worker log lines").get_by_text("says").first.wait_for()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    screenshot(page, "logs-phone")
    assert_clean(page)


def test_job_logs_show_a_failed_jobs_traceback(page, console_dev, two_workers) -> None:
    """joblogs.js `jobLogs` (the Requests tab shows it per job) on its own."""
    job = run_job(console_dev, "broken", fail=True)
    assert job["status"] == "FAILED", job
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.evaluate(
        """async ([endpoint, id]) => {
          const {jobLogs} = await import("./pages/joblogs.js");
          document.getElementById("main").replaceChildren(await jobLogs(endpoint, id));
        }""",
        [two_workers, job["id"]],
    )
    box = page.get_by_role("log", name=f"Log lines of job {job['id']}")
    box.get_by_text("RuntimeError: failing on purpose: broken", exact=True).wait_for()
    assert page.locator(".job-logs pre.log", has_text="Traceback").count() == 1
    assert "says after-open" not in box.inner_text()  # another job's lines
    screenshot(page, "job-logs")
    assert_clean(page)
