"""The console's LB request form in Chromium against a gateway on another origin: the
console at `http://127.0.0.1:PORT`, the job API (`LOCKGATE_BASE_URL`) at
`http://localhost:PORT` — one `lockgate dev`, two origins for the browser, so the form's
request needs the gateway's CORS pre-flight answer on `/lb/`, and the console's
Content-Security-Policy must list `LOCKGATE_BASE_URL`'s origin in `connect-src` (the browser
enforces it: a CSP without it blocks the call, and the violation fails `assert_clean`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import requests

from console_browser import assert_clean, sign_in, watched_tab
from devproc import DevProcess
from lockgate.dev.redis_server import free_port
from tests.lb_dev import WORKER

pytest_plugins = ["console_fixtures"]

LB = "lbcors"


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def two_origins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    port = free_port()
    env = {
        "LOAD_SECONDS": "1",
        "LOCKGATE_BASE_URL": f"http://localhost:{port}",
        "LOCKGATE_CORS_ALLOW_ORIGINS": f'["http://127.0.0.1:{port}"]',
    }
    dev = DevProcess(
        "--worker-command", WORKER, "--endpoint-id", LB, "--endpoint-type", "LB",
        "--idle-timeout", "60", data_dir=tmp_path_factory.mktemp("console-lb-cors"),
        port=port, env=env,
    )  # fmt: skip
    dev.start()
    yield dev
    dev.stop()


@pytest.fixture
def cross_origin_page(browser) -> Iterator:
    yield from watched_tab(browser)  # the console's CSP enforced


def test_the_lb_request_form_reaches_a_gateway_on_another_origin(cross_origin_page, two_origins):
    page, dev = cross_origin_page, two_origins
    csp = requests.get(f"{dev.url}/console/", timeout=10).headers["content-security-policy"]
    assert f"connect-src 'self' http://localhost:{dev.port};" in csp
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/endpoints/{LB}/requests")
    expect(page.locator("code.lb-url")).to_have_text(f"http://localhost:{dev.port}/lb/{LB}/")
    page.get_by_label("Method", exact=True).select_option("PUT")
    page.get_by_label("Path", exact=True).fill("/echo/cross?x=1")
    page.get_by_label("Headers", exact=True).fill("X-Custom: kept\nContent-Type: text/plain")
    page.get_by_label("Body", exact=True).fill("hi")
    page.get_by_role("button", name="Send").click()
    status = page.locator(".lb-answer .badge")
    expect(status).to_have_text("200 OK", timeout=60_000)  # through a cold start
    seen = json.loads(page.get_by_label("Answer body").inner_text())
    assert (seen["method"], seen["path"], seen["query"]) == ("PUT", "/echo/cross", "x=1")
    assert seen["headers"]["origin"] == f"http://127.0.0.1:{dev.port}"  # a cross-origin call
    assert seen["headers"]["x-custom"] == "kept"
    assert "authorization" not in seen["headers"]
    # X-Runpod-Worker-Id is readable by the page only because the gateway exposes it
    expect(page.locator(".lb-worker")).to_have_text(seen["worker"])
    assert_clean(page)
