"""The console's Releases tab, in Chromium against a real `lockgate dev`
(tests/console_fixtures.py): the releases of an endpoint whose template's env changed,
the rollout line, and a rollback through the confirmation dialog making a new version."""

from __future__ import annotations

import re

import requests

from console_browser import assert_clean, screenshot, sign_in
from devproc import DevProcess
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

ENV_ECHO = ["python", "-u", "tests/handlers/env_echo.py"]


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def call(dev: DevProcess, method: str, path: str, body: dict | None = None) -> dict:
    headers = {"authorization": f"Bearer {dev.key}"}
    answer = requests.request(method, f"{dev.url}{path}", json=body, headers=headers, timeout=30)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def test_the_releases_tab_shows_the_changes_and_rolls_back(page, console_dev):
    dev = console_dev
    template = call(
        dev, "POST", "/v1/templates",
        {"name": "rel", "imageName": "example.test/rel:1", "dockerStartCmd": ENV_ECHO,
         "env": {"GREETING": "hello"}},
    )  # fmt: skip
    call(dev, "POST", "/v1/endpoints", {"id": "rel-console", "templateId": template["id"]})
    call(dev, "PATCH", f"/v1/templates/{template['id']}", {"env": {"GREETING": "bye"}})

    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/endpoints/rel-console/releases")
    table = page.get_by_role("table", name="Releases")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator("tbody tr").first).to_contain_text('template.env: {"GREETING":"hello"}')
    expect(table.locator("tbody tr").first).to_contain_text("latest")
    expect(page.locator(".rollout")).to_contain_text(re.compile("version 2", re.I))
    screenshot(page, "releases")

    page.get_by_role("button", name="Roll back to version 1").click()
    dialog = page.get_by_role("dialog", name="Roll back?")
    expect(dialog).to_contain_text("version 1 becomes a new version")
    dialog.get_by_role("button", name="Roll back", exact=True).click()
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator("tbody tr").first).to_contain_text("3")
    expect(page.locator(".rollout")).to_contain_text(re.compile("version 3", re.I))
    screenshot(page, "releases-rolled-back")

    got = call(dev, "GET", f"/v1/templates/{template['id']}")
    assert got["env"] == {"GREETING": "hello"}
    releases = call(dev, "GET", "/v2/serverless/rel-console/releases")
    assert releases["endpointVersion"] == 3
    wait_until(lambda: call(dev, "GET", "/v1/endpoints/rel-console")["version"] == 3)
    assert_clean(page)
