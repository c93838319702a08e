"""The web console's shell: served without a build step under a strict CSP, sign-in with an
admin key kept out of URLs, a wrong key refused, usable at phone width. Pages have their
own test modules (tests/test_console_*.py)."""

from __future__ import annotations

import re

import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in

pytest_plugins = ["console_fixtures"]


def test_console_is_served_with_a_strict_content_security_policy(console_dev):
    page = requests.get(f"{console_dev.url}/console/", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp
    script = requests.get(f"{console_dev.url}/console/app.js", timeout=10)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert script.headers["content-security-policy"] == csp
    redirect = requests.get(f"{console_dev.url}/console", timeout=10, allow_redirects=False)
    assert redirect.status_code == 302 and redirect.headers["location"] == "/console/"


def test_make_run_prints_the_console_url(console_dev):
    line = console_dev.wait_for(r"lockgate dev \| console: ")
    assert f"{console_dev.url}/console/" in line


def test_sign_in_with_the_admin_key_keeps_it_out_of_the_url(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.get_by_role("link", name="API keys").wait_for()
    assert console_dev.key not in page.url
    stored = page.evaluate("sessionStorage.getItem('lockgate.key')")
    assert stored == console_dev.key
    screenshot(page, "signed-in")
    assert_clean(page)


def test_a_wrong_key_is_refused_with_a_reason(page, console_dev):
    sign_in(page, console_dev, key="lg_not-a-key")
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "not an admin key" in alert.inner_text()
    assert page.get_by_label("Admin API key").is_visible()
    assert page.evaluate("sessionStorage.getItem('lockgate.key')") is None
    screenshot(page, "wrong-key")
    assert_clean(page, allow=("401",))


def test_a_key_revoked_while_signed_in_leads_back_to_sign_in(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.evaluate("sessionStorage.setItem('lockgate.key', 'lg_revoked')")
    page.goto(f"{console_dev.url}/console/#/endpoints")
    page.reload()
    page.get_by_label("Admin API key").wait_for()
    assert page.get_by_role("alert").is_visible()


def test_phone_width_has_no_horizontal_scroll(page, console_dev):
    page.set_viewport_size(PHONE)
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    screenshot(page, "phone-endpoints")
