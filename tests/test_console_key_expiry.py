"""API key expiry in the console, in Chromium against a real `lockgate dev`: the create form's
expiry choices reach `/v1/keys` as `expiresAt`, the list says "expires in …" or "expired",
and signing in with an expired admin key says it expired (not that the key is unknown)."""

from __future__ import annotations

import re
import time
from datetime import datetime

import requests

from console_browser import assert_clean, screenshot, sign_in
from lockgate.models.keys import rfc3339

pytest_plugins = ["console_fixtures"]

EXPECTED = ("401",)


def listed(dev, name: str) -> dict:
    keys = requests.get(f"{dev.url}/v1/keys", headers=dev.headers(), timeout=10).json()
    return next(k for k in keys if k["name"] == name)


def create_in_form(page, name: str, expiry: str, date: str | None = None) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Expires", exact=True).select_option(label=expiry)
    if date is not None:
        page.get_by_label("Expiry date (UTC midnight)").fill(date)
    page.get_by_role("button", name="Create key").click()


def test_the_create_form_sets_an_expiry_and_the_list_shows_it(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/keys")
    page.get_by_role("button", name="Create key").wait_for()
    assert not page.get_by_label("Expiry date (UTC midnight)").is_visible()  # only for a date

    before = time.time()
    create_in_form(page, "month-key", "In 30 days")
    page.get_by_text('Key "month-key" created').wait_for()
    expires = datetime.fromisoformat(listed(console_dev, "month-key")["expiresAt"]).timestamp()
    assert before + 30 * 86400 - 5 <= expires <= time.time() + 30 * 86400 + 5
    row = page.locator('tr[data-key="month-key"]')
    assert "expires in 30 days" in row.inner_text()

    page.get_by_role("button", name="Done").click()
    create_in_form(page, "dated-key", "On a date…")  # no date picked: said, nothing made
    page.get_by_text("Expires: choose a date").wait_for()
    names = [
        k["name"]
        for k in requests.get(
            f"{console_dev.url}/v1/keys", headers=console_dev.headers(), timeout=10
        ).json()
    ]
    assert "dated-key" not in names
    create_in_form(page, "dated-key", "On a date…", "2030-01-01")
    page.get_by_text('Key "dated-key" created').wait_for()
    assert listed(console_dev, "dated-key")["expiresAt"] == "2030-01-01T00:00:00Z"
    signed_in = page.locator("tr[data-key]", has=page.locator(".you"))  # dev's key: no expiry
    assert "never" in signed_in.get_by_role("cell").nth(5).inner_text()
    screenshot(page, "keys-expiry")
    assert_clean(page, allow=EXPECTED)


def test_an_expired_key_is_marked_and_cannot_sign_in(page, console_dev):
    expires_ms = (time.time_ns() // 1_000_000 // 1000 + 3) * 1000  # a whole second, 2-3 s ahead
    answer = requests.post(
        f"{console_dev.url}/v1/keys",
        json={"name": "brief-admin", "scopes": ["admin"], "expiresAt": rfc3339(expires_ms)},
        headers=console_dev.headers(),
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    while time.time_ns() // 1_000_000 < expires_ms:
        time.sleep(0.2)

    page.goto(f"{console_dev.url}/console/")
    page.get_by_label("Admin API key").fill(answer.json()["key"])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text(f"API key expired at {rfc3339(expires_ms)}").wait_for()
    screenshot(page, "keys-expired-sign-in")

    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/keys")
    row = page.locator('tr[data-key="brief-admin"]')
    row.wait_for()
    assert "expired" in row.get_by_role("cell").nth(5).inner_text()
    assert row.get_by_role("button", name="Revoke brief-admin").count() == 1  # still revocable
    assert_clean(page, allow=EXPECTED)
