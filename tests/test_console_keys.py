"""The API keys page's safety, in Chromium against a real `lockgate dev`: the key the console
is signed in with is marked and is revoked only after its name is typed (then the console
signs out), and running workers' temporary keys are listed apart without a Revoke button."""

from __future__ import annotations

import re

import requests

from console_browser import assert_clean, create_endpoint, create_key, screenshot, sign_in
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

EXPECTED = ("401", "404")


def test_revoking_the_key_you_are_signed_in_with_needs_its_name(page, console_dev):
    key = create_key(console_dev, "second-admin", ["admin"])
    sign_in(page, console_dev, key=key)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/keys")
    row = page.locator('tr[data-key="second-admin"]')
    row.wait_for()
    assert "you are signed in with it" in row.inner_text()
    other = page.locator("tr[data-key]", has=page.locator(".you")).count()
    assert other == 1  # only the key in use is marked

    row.get_by_role("button", name="Revoke second-admin").click()
    warning = row.get_by_role("alert")
    assert "signs you out" in warning.inner_text()
    revoke = row.locator("button.danger", has_text="Revoke second-admin")
    assert revoke.is_disabled()
    row.get_by_label("Type second-admin to revoke it").fill("second")
    assert revoke.is_disabled()
    screenshot(page, "keys-revoke-own")
    row.get_by_label("Type second-admin to revoke it").fill("second-admin")
    revoke.click()
    page.get_by_label("Admin API key").wait_for()  # signed out
    gone = requests.get(f"{console_dev.url}/v1/keys", headers=auth(key), timeout=10)
    assert gone.status_code == 401

    # the dev key is now the last admin key: no Revoke for it (the API answers 409)
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/keys")
    dev = page.locator("tr[data-key]", has=page.locator(".you"))
    dev.get_by_text("The last admin key").wait_for()
    assert dev.get_by_role("button").count() == 0
    assert_clean(page, allow=EXPECTED)


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_worker_keys_are_listed_apart_without_revoke(page, console_dev):
    create_endpoint(console_dev, "kept-up", templateId="examples/echo/handler.py", workersMin=1)

    def worker_key() -> dict | None:
        keys = requests.get(f"{console_dev.url}/v1/keys", headers=console_dev.headers(), timeout=10)
        return next((k for k in keys.json() if k.get("worker", "").startswith("kept-up")), None)

    key = wait_until(worker_key, "the kept-up worker's key")
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/keys")
    workers = page.get_by_role("table", name="Worker keys")
    workers.get_by_text(key["worker"]).wait_for()
    assert workers.get_by_role("button").count() == 0
    user_keys = page.get_by_role("table", name="Keys", exact=True)
    assert user_keys.get_by_text(key["worker"]).count() == 0
    # the endpoint's shared worker key is lockgate's too: listed with the workers, no Revoke
    assert "every worker of kept-up" in workers.inner_text()
    assert user_keys.get_by_text("dev-worker:kept-up").count() == 0
    screenshot(page, "keys-workers")
    assert_clean(page, allow=EXPECTED)
