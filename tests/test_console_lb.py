"""The console's load-balancing endpoints in Chromium against a real `lockgate dev` whose LB
workers are the FastAPI example's processes: the type chosen at create (LB locks the
scaler to REQUEST_COUNT), the LB URL, a request of any method, path, headers and body sent
through the gateway and its answer with the worker that served it, requests held and in
flight, and no job API widgets on an LB endpoint."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in
from devproc import DevProcess
from tests.lb_dev import WORKER

pytest_plugins = ["console_fixtures"]

LB = "lb-api"  # made through the management API by the fixture
EXPECTED = ("400",)  # a refused form shows the API's 400, which the browser logs


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def console_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` (echo queue endpoint) and an LB endpoint of the example worker."""
    data_dir = tmp_path_factory.mktemp("console-lb")
    dev = DevProcess("examples/echo/handler.py", data_dir=data_dir, env={"LOAD_SECONDS": "1"})
    dev.start()
    spec = {
        "id": LB, "type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1,
        "templateId": WORKER, "workersMax": 1, "idleTimeout": 120, "lbHoldS": 60,
    }  # fmt: skip
    made = requests.post(f"{dev.url}/v1/endpoints", json=spec, headers=auth(dev), timeout=30)
    assert made.status_code == 200, made.text
    yield dev
    dev.stop(90)


def auth(dev: DevProcess) -> dict[str, str]:
    return {"authorization": f"Bearer {dev.key}"}


def record(dev: DevProcess, endpoint_id: str) -> dict:
    url = f"{dev.url}/v1/endpoints/{endpoint_id}"
    return requests.get(url, headers=auth(dev), timeout=10).json()


def signed_in(page, dev: DevProcess, hash_: str) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/{hash_}")


def send(page, method: str, path: str, headers: str = "", body: str = "") -> None:
    page.get_by_label("Method", exact=True).select_option(method)
    page.get_by_label("Path", exact=True).fill(path)
    page.get_by_label("Headers", exact=True).fill(headers)
    page.get_by_label("Body", exact=True).fill(body)
    page.get_by_role("button", name="Send").click()


def answer_status(page):
    return page.locator(".lb-answer .badge")


def test_create_an_lb_endpoint_locks_the_scaler_and_shows_its_lb_url(page, console_dev):
    signed_in(page, console_dev, "#/new")
    queue = page.get_by_role("radio", name=re.compile("^Queue"))
    expect(queue).to_be_checked()  # the default type
    expect(page.get_by_label("Hold for a worker (s)")).to_be_hidden()
    page.get_by_label("Endpoint id").fill("lb-console")
    page.get_by_role("radio", name=re.compile("^Load balancer")).check()
    scaler = page.get_by_label("Scaler", exact=True)
    expect(scaler).to_have_value("REQUEST_COUNT")
    expect(scaler).to_be_disabled()
    page.get_by_label("Template, handler file or command").fill(WORKER)
    page.get_by_label("Workers max").fill("1")
    page.get_by_label("Hold for a worker (s)").fill("-1")
    page.get_by_label("Request timeout (s)").fill("90")
    screenshot(page, "create-lb")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.get_by_role("alert")).to_contain_text("lbHoldS")  # the API's own message
    expect(page.get_by_label("Hold for a worker (s)")).to_have_attribute("aria-invalid", "true")

    page.get_by_label("Hold for a worker (s)").fill("45")
    page.get_by_role("button", name="Create endpoint").click()
    url = f"{console_dev.url}/lb/lb-console/"
    expect(page.locator("code.url")).to_have_text(url)
    stored = record(console_dev, "lb-console")
    assert (stored["type"], stored["scalerType"]) == ("LB", "REQUEST_COUNT")
    assert (stored["lbHoldS"], stored["requestTimeoutS"], stored["workersMax"]) == (45, 90, 1)
    # back to Queue: the scaler is free again (a reload: the hash is still #/new)
    page.reload()
    page.get_by_role("radio", name=re.compile("^Load balancer")).check()
    page.get_by_role("radio", name=re.compile("^Queue")).check()
    expect(page.get_by_label("Scaler", exact=True)).to_be_enabled()
    assert_clean(page, allow=EXPECTED)


def test_create_from_an_image_takes_the_type_too(page, console_dev):
    signed_in(page, console_dev, "#/new")
    page.get_by_label("Endpoint id").fill("lb-image")
    page.get_by_label("A container image").check()
    page.get_by_role("radio", name=re.compile("^Load balancer")).check()
    expect(page.get_by_label("Scaler", exact=True)).to_be_disabled()
    page.get_by_label("Container image", exact=True).fill("registry.example.com/lb:1")
    page.get_by_label("Start command").fill(WORKER)
    page.get_by_label("HTTP ports").fill("8000/http")
    page.get_by_label("Workers max").fill("1")
    page.get_by_label("Request timeout (s)").fill("80")
    screenshot(page, "create-lb-from-image")
    page.get_by_role("button", name="Create endpoint").click()
    expect(page.locator("code.url")).to_have_text(f"{console_dev.url}/lb/lb-image/")
    stored = record(console_dev, "lb-image")
    assert (stored["type"], stored["scalerType"], stored["requestTimeoutS"]) == (
        "LB",
        "REQUEST_COUNT",
        80,
    )
    template = requests.get(
        f"{console_dev.url}/v1/templates/{stored['templateId']}",
        headers=auth(console_dev),
        timeout=10,
    ).json()
    assert template["imageName"] == "registry.example.com/lb:1"
    # the template's start command is the LB worker: a request through the gateway answers
    answer = requests.get(
        f"{console_dev.url}/lb/lb-image/echo/hi", headers=auth(console_dev), timeout=120
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["path"].endswith("/echo/hi")
    assert_clean(page, allow=EXPECTED)


def test_a_request_goes_through_the_gateway_and_shows_its_answer_and_worker(page, console_dev):
    signed_in(page, console_dev, f"#/endpoints/{LB}/requests")
    expect(page.locator("code.lb-url")).to_have_text(f"{console_dev.url}/lb/{LB}/")
    # an LB endpoint has no jobs: no JSON input to run, no list of requests
    expect(page.get_by_label("Method", exact=True)).to_be_visible()
    expect(page.get_by_label("Request body (JSON)")).to_have_count(0)
    expect(page.get_by_role("button", name="Run", exact=True)).to_have_count(0)
    expect(page.get_by_role("table", name="Requests")).to_have_count(0)

    send(page, "GET", "/echo/x", body="not for a GET")
    expect(page.get_by_role("alert")).to_contain_text("A GET request has no body")
    send(page, "POST", "/echo/x", headers="no colon here")
    expect(page.get_by_role("alert")).to_contain_text('Header line 1 is not "Name: value"')

    send(page, "POST", "/echo/from-console?x=1", "X-Custom: kept\nContent-Type: text/plain", "hi")
    expect(answer_status(page)).to_have_text("200 OK", timeout=60_000)  # through a cold start
    shown = page.get_by_label("Answer body")
    expect(shown).to_contain_text('"path": "/echo/from-console"')
    seen = json.loads(shown.inner_text())
    assert (seen["method"], seen["query"], seen["body"]) == ("POST", "x=1", "aGk=")  # "hi"
    assert seen["headers"]["x-custom"] == "kept"
    assert "authorization" not in seen["headers"]  # the gateway removed the console's key
    worker = page.locator(".lb-worker")
    expect(worker).to_have_text(seen["worker"])  # X-Runpod-Worker-Id: who served it
    screenshot(page, "lb-requests")

    send(page, "GET", "/no-such-route")
    expect(answer_status(page)).to_have_text(re.compile("^404"))  # the worker's own answer
    expect(worker).to_have_text(seen["worker"])
    assert_clean(page, allow=("404", *EXPECTED))


def test_a_stream_shows_as_it_arrives_while_the_request_counts_in_flight(page, console_dev):
    signed_in(page, console_dev, f"#/endpoints/{LB}/requests")
    send(page, "GET", "/sse?n=2&hold=console")
    shown = page.get_by_label("Answer body")
    expect(shown).to_contain_text('"i": 0', timeout=60_000)  # the first event, not the last
    assert '"i": 1' not in shown.inner_text()
    in_flight = page.locator(".stat", has_text="in flight").locator(".stat-value")
    expect(in_flight).to_have_text("1", timeout=15_000)  # from /health, refreshed every 2 s
    worker = page.locator(".lb-worker").inner_text()
    released = requests.post(
        f"{console_dev.url}/lb/{LB}/release/console",
        headers={**auth(console_dev), "X-Runpod-Worker-Id": f"strict {worker}"},
        timeout=30,
    )
    assert released.status_code == 200, released.text
    expect(shown).to_contain_text('"i": 1')
    expect(in_flight).to_have_text("0", timeout=15_000)
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "lb-requests-phone")
    assert_clean(page)


def test_the_overview_shows_the_lb_url_requests_and_lb_settings_not_jobs(page, console_dev):
    signed_in(page, console_dev, f"#/endpoints/{LB}")
    summary = page.get_by_role("region", name="Endpoint")
    expect(summary.locator("code.lb-url")).to_have_text(f"{console_dev.url}/lb/{LB}/")
    held = page.get_by_role("region", name="Requests")
    expect(held).to_contain_text("held")
    expect(held).to_contain_text("in flight")
    expect(page.get_by_role("region", name="Workers")).to_be_visible()
    expect(page.get_by_role("region", name="Jobs")).to_have_count(0)
    settings = page.get_by_role("region", name="Settings")
    expect(settings).to_contain_text("Load balancer (LB)")
    expect(settings).to_contain_text("60 s")  # lbHoldS
    screenshot(page, "lb-overview")
    assert_clean(page)


def test_the_overview_of_an_lb_endpoint_shows_call_it_snippets_for_its_lb_url(page, console_dev):
    """Issue 50, item 9: curl, requests, fetch and the OpenAI SDK, all on `/lb/{id}/`."""
    signed_in(page, console_dev, f"#/endpoints/{LB}")
    card = page.get_by_role("region", name="Call it")
    base = f"{console_dev.url}/lb/{LB}/"
    expect(card).to_contain_text(f"Any method and path after {base}")
    for tab, shown in [
        ("cURL", f"curl {base}ping"),
        ("Python (requests)", f'url = "{base}"'),
        ("JavaScript (fetch)", f'const url = "{base}";'),
        ("Python (OpenAI SDK)", f'OpenAI(base_url="{base}v1"'),
    ]:
        card.get_by_role("tab", name=tab).click()
        expect(card.locator("pre.snippet")).to_contain_text(shown)
        assert "/v2/" not in card.locator("pre.snippet").inner_text()
    expect(card.get_by_role("tab", name="Python (runpod SDK)")).to_have_count(0)
    card.get_by_role("tab", name="cURL").click()
    curl = card.locator("pre.snippet").inner_text().splitlines()[0]
    url = curl.split()[1]
    pinged = requests.get(url, headers=auth(console_dev), timeout=120)  # the snippet works
    assert pinged.status_code == 200, pinged.text
    screenshot(page, "lb-call-it")
    assert_clean(page)


def test_a_request_held_by_a_cold_start_says_so_and_counts_its_time(page, console_dev):
    """Issue 50, item 9: while no worker is ready the form says 'held: waiting for a
    worker (1 held)' and the seconds since it was sent, then the answer."""
    template = {"name": "lb-slow", "imageName": "local/lb-slow:1",
                "dockerStartCmd": WORKER.split(), "env": {"LOAD_SECONDS": "20"}}  # fmt: skip
    made = requests.post(f"{console_dev.url}/v1/templates", json=template,
                         headers=auth(console_dev), timeout=30)  # fmt: skip
    assert made.status_code == 200, made.text
    spec = {
        "id": "lb-slow", "type": "LB", "scalerType": "REQUEST_COUNT", "scalerValue": 1,
        "templateId": made.json()["id"], "workersMax": 1, "lbHoldS": 90,
    }  # fmt: skip
    made = requests.post(f"{console_dev.url}/v1/endpoints", json=spec,
                         headers=auth(console_dev), timeout=30)  # fmt: skip
    assert made.status_code == 200, made.text
    try:
        signed_in(page, console_dev, "#/endpoints/lb-slow/requests")
        send(page, "GET", "/echo/held")
        expect(answer_status(page)).to_have_text("held: waiting for a worker (1 held)",
                                                 timeout=15_000)  # fmt: skip
        took = page.locator(".lb-answer .hint").first
        expect(took).to_have_text(re.compile(r"^\d+\.\d s$"))
        screenshot(page, "lb-held")
        expect(answer_status(page)).to_have_text("200 OK", timeout=90_000)
        expect(took).to_have_text(re.compile(r"^\d+ ms$"))
        assert_clean(page)
    finally:
        requests.delete(f"{console_dev.url}/v1/endpoints/lb-slow", headers=auth(console_dev),
                        timeout=30)  # fmt: skip


def test_editing_an_lb_endpoint_keeps_its_type_and_clears_its_hold(page, console_dev):
    signed_in(page, console_dev, f"#/endpoints/{LB}/edit")
    expect(page.get_by_role("radio", name=re.compile("^Load balancer"))).to_be_checked()
    expect(page.get_by_role("radio", name=re.compile("^Queue"))).to_be_disabled()
    expect(page.get_by_label("Scaler", exact=True)).to_be_disabled()
    page.get_by_label("Hold for a worker (s)").fill("")
    page.get_by_role("button", name="Review changes").click()
    expect(page.get_by_role("table").get_by_role("row", name=re.compile("lbHoldS"))).to_be_visible()
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_text(re.compile(r"^Saved: lbHoldS 60 → \(empty\)"))).to_be_visible()
    stored = record(console_dev, LB)
    assert stored["lbHoldS"] is None and stored["type"] == "LB"
    assert_clean(page)


def test_the_endpoints_list_shows_an_lb_endpoint_by_its_lb_url_and_requests(page, console_dev):
    """The list's row of an LB endpoint: its LB URL (with the trailing / its paths follow)
    and requests held / in flight where a queue endpoint shows its job API URL and queue."""
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    lb = page.locator(f'tr[data-endpoint="{LB}"]')
    expect(lb.locator('td[data-label="URL"] code.url')).to_have_text(f"{console_dev.url}/lb/{LB}/")
    expect(lb.locator('td[data-label="URL"]')).to_contain_text("LB URL")
    expect(lb.locator('td[data-label="Queue"]')).to_contain_text(re.compile(r"\d+ held"))
    expect(lb.locator('td[data-label="Queue"]')).to_contain_text(re.compile(r"\d+ in flight"))
    expect(lb.locator('td[data-label="Jobs/min"]')).to_have_text("no jobs (LB)")
    queue = page.locator('tr[data-endpoint]:not([data-endpoint="lb-api"])').first
    job_api = queue.locator('td[data-label="URL"] code.url')
    expect(job_api).to_have_text(re.compile(r"/v2/[^/]+$"))
    expect(queue.locator('td[data-label="URL"]')).to_contain_text("job API")
    screenshot(page, "lb-endpoints-list")
    assert_clean(page)
