"""The console's Batches tab (issue 49, item 4) in a real browser against a real
`lockgate dev`: the endpoint's batches with their progress, a batch's requests paged with
the request inspector of each, and Cancel through its confirmation."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from console_browser import PHONE, assert_clean, create_endpoint, screenshot, sign_in
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

ENDPOINT = "console-batches"


def call(dev, method: str, path: str, body=None) -> dict:
    resp = requests.request(
        method, f"{dev.url}/v2/{ENDPOINT}/{path}", json=body, headers=dev.headers(), timeout=30
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def batches(console_dev) -> tuple[str, str]:
    """A batch run to its end (two requests completed, one failed), and a DRAFT."""
    create_endpoint(
        console_dev, ENDPOINT, templateId="python tests/handlers/sleeper.py async",
        workersMax=1, batchWorkersMax=1, idleTimeout=5,
    )  # fmt: skip
    inputs = [{"input": {"n": 1}}, {"input": {"n": 2}}, {"input": {"n": 3, "fail": "bad three"}}]
    done = call(console_dev, "POST", "batch", inputs)["id"]
    call(console_dev, "PUT", f"batch/{done}", {"name": "nightly"})
    call(console_dev, "POST", f"batch/{done}/finalize")
    wait_until(lambda: call(console_dev, "GET", f"batch/{done}")["doneAt"], "the batch done", 60)
    draft = call(console_dev, "POST", "batch", [{"input": {"n": 4}}, {"input": {"n": 5}}])["id"]
    return done, draft


def test_batches_tab_progress_requests_inspector_and_cancel(page, console_dev, batches) -> None:
    done, draft = batches
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{ENDPOINT}/batches")
    table = page.get_by_role("table", name="Batches")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(2)
    assert rows.nth(0).get_attribute("data-batch") == draft  # newest first
    finished = table.locator(f'tr[data-batch="{done}"]')
    expect(finished.locator(".badge")).to_have_text("FAILED")
    expect(finished).to_contain_text("nightly")
    bar = page.get_by_role(
        "img", name=f"Progress of {done}: 2 completed, 1 failed, 0 in progress of 3"
    )
    expect(bar).to_be_visible()
    expect(finished.get_by_role("button", name=f"Cancel {done}")).to_have_count(0)
    screenshot(page, "batches")

    # its requests, and one opened in the request inspector
    page.get_by_role("button", name=f"Requests of {done}").click()
    children = page.get_by_role("table", name=f"Requests of {done}").locator("tbody tr")
    expect(children).to_have_count(3)
    expect(children.locator(".badge.bad")).to_have_count(1)
    first = children.nth(0).get_attribute("data-request")
    page.get_by_role("button", name=f"Inspect {first}").click()
    inspector = page.get_by_role("region", name=f"Job {first}")
    expect(inspector).to_contain_text("COMPLETED")
    expect(page.get_by_label(f"Output of {first}")).to_contain_text('"n": 1')
    screenshot(page, "batches-requests")

    # Cancel, after its confirmation: the DRAFT is CANCELLED
    page.get_by_role("button", name=f"Cancel {draft}").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel batch")
    dialog.get_by_role("button", name="Cancel batch").click()
    expect(table.locator(f'tr[data-batch="{draft}"] .badge')).to_have_text("CANCELLED")

    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "batches-phone")
    assert_clean(page)
