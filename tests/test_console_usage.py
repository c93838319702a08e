"""The console's Usage page (issue 50, item 10) against a real `lockgate dev` with a GPU price:
the figures of an endpoint that ran a worker, in the table, the chart and the CSV export,
against `GET /v2/billing/serverless` and the price the test set; an endpoint that ran no
worker has no row; the execution time of a key's job in the per-key table and the CSV."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from console_browser import PHONE, assert_clean, create_key, screenshot, sign_in
from devproc import DevProcess
from priced_dev import priced_dev
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

PRICE = 0.36  # per GPU-hour of an NVIDIA L4
RAN, IDLE = "usage-ran", "usage-idle"


@pytest.fixture(scope="module", name="priced_dev")
def priced_dev_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with a price per L4 hour, and an endpoint that keeps one worker up."""
    ran = {"workersMin": 1, "workersMax": 1, "gpuTypeIds": ["NVIDIA L4"], "gpuCount": 1}
    endpoints = {RAN: ran, IDLE: {"workersMin": 0}}
    with priced_dev(tmp_path_factory.mktemp("usage"), {"NVIDIA L4": PRICE}, endpoints) as dev:
        yield dev


def billing(dev: DevProcess, **params) -> dict:
    resp = requests.get(
        f"{dev.url}/v2/billing/serverless", params=params, headers=dev.headers(), timeout=10
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def run_with_key(dev: DevProcess, name: str) -> str:
    """One job on RAN with a new key of that name; the key's id."""
    key = create_key(dev, name, ["jobs"])
    r = requests.post(
        f"{dev.url}/v2/{RAN}/runsync", json={"input": {"sleep": 0.3}},
        headers={"authorization": f"Bearer {key}"}, timeout=90,
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["status"] == "COMPLETED", r.text
    listed = requests.get(f"{dev.url}/v1/keys", headers=dev.headers(), timeout=10).json()
    return next(k["id"] for k in listed if k["name"] == name)


class BillingAnswers:
    """The billing answers the page got, kept as they pass through a route. Chrome may drop
    a response's body before the test reads it ("No data found for resource"); these are
    the very bodies the page read."""

    def __init__(self, page) -> None:
        self.bodies: dict[str, dict] = {}
        page.route(re.compile(r"/v2/billing/serverless(\?|$)"), self._pass)

    def _pass(self, route) -> None:
        response = route.fetch()
        self.bodies[route.request.url] = response.json()
        route.fulfill(response=response)

    def of(self, response) -> dict:
        """The body of the answer `response` (an `expect_response` value) carried."""
        return self.bodies[response.url]


def test_usage_page_shows_what_the_endpoint_ran(page, priced_dev) -> None:
    key_id = run_with_key(priced_dev, "usage-key")

    def counted() -> bool:
        totals = billing(priced_dev, bucketSize="hour", lastN=24, serverlessId=RAN)
        return totals["metadata"]["totals"]["workerSeconds"] >= 20

    wait_until(counted, "two 10 s intervals of the worker counted", timeout=90)
    sign_in(page, priced_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    answers = BillingAnswers(page)
    with (
        page.expect_response(
            lambda r: "/v2/billing/serverless" in r.url and "groupBy" not in r.url
        ) as answered,
        page.expect_response(lambda r: "groupBy=apiKey" in r.url) as keyed_answer,
    ):
        page.goto(f"{priced_dev.url}/console/#/usage")
    read = answers.of(answered.value)  # the figures the page read
    keyed = answers.of(keyed_answer.value)
    assert read["metadata"]["query"]["bucketSize"] == "hour"
    mine = [r for r in read["records"] if r["serverlessId"] == RAN]
    seconds = sum(r["workerSeconds"] for r in mine)
    assert seconds >= 20 and seconds % 10 == 0  # whole 10 s intervals of one worker
    gpu = sum(r["gpuSeconds"] for r in mine)
    assert gpu == seconds  # one GPU per worker
    cost = round(gpu / 3600 * PRICE, 6)
    assert abs(sum(r["totalAmount"] for r in mine) - cost) < 1e-5

    table = page.get_by_role("table", name="Usage by endpoint")
    row = table.locator(f'tbody tr[data-endpoint="{RAN}"]')
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text(str(seconds))
    expect(cells.nth(3)).to_have_text(str(gpu))
    expect(cells.nth(4)).to_have_text(f"NVIDIA L4: {gpu} s")
    expect(cells.nth(6)).to_have_text(f"{cost:.2f}" if cost >= 0.01 else f"{cost:.6f}")
    expect(table.locator(f'tbody tr[data-endpoint="{IDLE}"]')).to_have_count(0)
    total = read["metadata"]["totals"]["workerSeconds"]
    expect(table.locator("tfoot td").first).to_have_text(str(total))
    chart = page.get_by_role("img", name="Worker-seconds per hour, by endpoint")
    assert chart.locator("rect.bar").count() == len(read["records"])
    screenshot(page, "usage")

    mine_keyed = [r for r in keyed["records"] if r["apiKeyId"] == key_id]
    ran = sum(r["executionSeconds"] for r in mine_keyed)
    assert 0.3 <= ran < 5
    key_row = page.get_by_role("table", name="Usage by API key").locator(
        f'tbody tr[data-key="{key_id}"]'
    )
    key_cells = key_row.locator("td")
    expect(key_cells.nth(0)).to_have_text(key_id)
    expect(key_cells.nth(1)).to_have_text("usage-key")
    expect(key_cells.nth(2)).to_have_text(str(round(ran, 3)).removesuffix(".0"))
    expect(key_cells.nth(3)).to_have_text(str(round(ran, 3)).removesuffix(".0"))  # one GPU
    key_chart = page.get_by_role("img", name="Execution seconds per hour, by API key")
    expect(key_chart.locator("rect.bar")).to_have_count(len(keyed["records"]))
    expect(key_chart.locator("title", has_text=key_id)).to_have_count(len(mine_keyed))

    page.get_by_label("Chart").select_option("gpuSeconds")
    expect(page.get_by_role("img", name="GPU-seconds per hour, by endpoint")).to_have_count(1)
    expect(page.get_by_role("img", name="GPU-seconds per hour, by API key")).to_have_count(1)
    with page.expect_download() as done:
        page.get_by_role("button", name="Export CSV").click()
    assert done.value.suggested_filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(Path(done.value.path()).read_text())))
    by_endpoint = [r for r in rows if r["serverlessId"]]
    assert [
        (r["serverlessId"], int(r["workerSeconds"]), int(r["gpuSeconds"])) for r in by_endpoint
    ] == [(r["serverlessId"], r["workerSeconds"], r["gpuSeconds"]) for r in read["records"]]
    by_key = [r for r in rows if r["apiKeyId"]]
    assert [(r["apiKeyId"], float(r["executionSeconds"])) for r in by_key] == [
        (r["apiKeyId"] or "(no key)", r["executionSeconds"]) for r in keyed["records"]
    ]

    # a custom range: today (UTC) by hour, the same figures for the endpoint
    page.get_by_label("Range").select_option("custom")
    today = page.evaluate("new Date().toISOString().slice(0, 10)")
    page.get_by_label("From", exact=True).fill(today)
    page.get_by_label("to", exact=True).fill(today)
    page.get_by_label("Buckets").select_option("hour")
    with page.expect_response(
        lambda r: "/v2/billing/serverless" in r.url and "groupBy" not in r.url
    ) as answered:
        page.get_by_role("button", name="Show").click()
    custom = answers.of(answered.value)
    query = custom["metadata"]["query"]
    assert query["startTime"] == f"{today}T00:00:00Z" and query["bucketSize"] == "hour"
    assert query["lastN"] is None
    totals = custom["metadata"]["totals"]
    expect(table.locator("tfoot td").first).to_have_text(str(totals["workerSeconds"]))
    assert totals["workerSeconds"] >= 20
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "usage-phone")
    assert_clean(page)
