"""The console's Endpoints, Create, Edit, Delete and API keys pages, in Chromium against a
real `lockgate dev` (tests/console_fixtures.py). Every action goes through the public APIs,
so each test checks the result there too (GET /v1/endpoints/{id}, the job API)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest
import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in
from devproc import REPO, DevProcess

pytest_plugins = ["console_fixtures"]

ECHO = "examples/echo/handler.py"
GONE = "gone-handler"  # an endpoint whose handler file vanished between two runs: Failed
# A validation error is a logged 400.
EXPECTED = ("400",)
# Seconds `lockgate dev` may take to start or stop: generous, the test machine's cores are
# shared (a stop waited more than 30 s there once).
STOP_S = 90


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def console_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`lockgate dev` with the echo handler, and an endpoint `gone-handler` created through
    the API in an earlier run whose handler file was deleted since: it comes back Failed,
    with a False condition saying why (the way any failing endpoint reports its cause)."""
    data_dir = tmp_path_factory.mktemp("console-endpoints")
    handler = tmp_path_factory.mktemp("handlers") / "soon_gone.py"
    shutil.copy(REPO / ECHO, handler)
    first = DevProcess(ECHO, data_dir=data_dir).start()
    try:
        body = {"id": GONE, "templateId": str(handler)}
        answer = requests.post(f"{first.url}/v1/endpoints", json=body, headers=auth(first))
        assert answer.status_code == 200, answer.text
    finally:
        first.stop(STOP_S)
    handler.unlink()
    dev = DevProcess(ECHO, data_dir=data_dir).start(timeout_s=STOP_S)
    yield dev
    dev.stop(STOP_S)


def auth(dev: DevProcess, key: str | None = None) -> dict[str, str]:
    return {"authorization": f"Bearer {key or dev.key}"}


def record(dev: DevProcess, endpoint_id: str) -> requests.Response:
    return requests.get(f"{dev.url}/v1/endpoints/{endpoint_id}", headers=auth(dev), timeout=10)


def create_by_api(dev: DevProcess, endpoint_id: str) -> None:
    body = {"id": endpoint_id, "templateId": ECHO}
    answer = requests.post(f"{dev.url}/v1/endpoints", json=body, headers=auth(dev), timeout=30)
    assert answer.status_code == 200, answer.text


def signed_in(page, dev: DevProcess, hash_: str = "#/endpoints") -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    if hash_ != "#/endpoints":
        page.goto(f"{dev.url}/console/{hash_}")


def no_horizontal_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


def test_create_shows_the_apis_error_then_the_new_endpoints_job_api_url(page, console_dev):
    signed_in(page, console_dev, "#/new")
    page.get_by_label("Endpoint id").fill("made-in-console")
    page.get_by_label("Template, handler file or command").fill(ECHO)
    page.get_by_label("Workers min").fill("5")
    page.get_by_label("Workers max").fill("2")
    expect(page.get_by_role("radio", name=re.compile("^Queue"))).to_be_checked()  # the default
    # GPU types in priority order, reordered with the keyboard (folded away in dev mode)
    page.locator("details.placement summary").click()
    for gpu in ("NVIDIA L4", "NVIDIA A100"):
        page.get_by_label("GPU types, in priority order").fill(gpu)
        page.get_by_label("GPU types, in priority order").press("Enter")
    page.get_by_role("button", name="Move NVIDIA A100 up").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("list", name="GPU types, most preferred first")).to_contain_text(
        "1. NVIDIA A100"
    )
    screenshot(page, "create")

    page.get_by_role("button", name="Create endpoint").click()
    alert = page.get_by_role("alert")
    same = requests.post(
        f"{console_dev.url}/v1/endpoints",
        json={"templateId": ECHO, "workersMin": 5, "workersMax": 2},
        headers=auth(console_dev),
        timeout=10,
    ).json()["error"]
    assert "workersMin (5) must not exceed workersMax (2)" in same
    # the API's message in the form's own words, beside the first field it names
    expect(alert).to_contain_text("Workers min (5) must not exceed Workers max (2)")
    assert "workersMin" not in alert.inner_text()

    page.get_by_label("Workers min").fill("0")
    page.get_by_role("button", name="Create endpoint").click()
    url = f"{console_dev.url}/v2/made-in-console/"
    expect(page.locator("code.url")).to_have_text(url.rstrip("/"))  # `${url}/runsync` works
    expect(page.get_by_role("heading", level=1)).to_have_text("Created made-in-console")
    requests_link = page.get_by_role("link", name="Send a test request")
    assert requests_link.get_attribute("href") == "#/endpoints/made-in-console/requests"
    stored = record(console_dev, "made-in-console").json()
    assert stored["gpuTypeIds"] == ["NVIDIA A100", "NVIDIA L4"]
    assert stored["templateId"] == str(REPO / ECHO)
    assert stored["jobApiUrl"] == url
    assert_clean(page, allow=EXPECTED)


def test_endpoints_list_shows_state_and_makes_a_failing_endpoint_stand_out(page, console_dev):
    signed_in(page, console_dev)
    echo = page.locator(f'tr[data-endpoint="{console_dev.endpoint}"]')
    expect(echo).to_contain_text("Ready")
    expect(echo).to_contain_text(f"{console_dev.url}/v2/{console_dev.endpoint}")
    copy = echo.get_by_role("button", name=re.compile(r"^Copy: "))
    assert copy.get_attribute("aria-label").endswith(f"/v2/{console_dev.endpoint}")  # no "/"
    expect(echo).to_contain_text("min 0 · max 3")
    expect(echo.get_by_role("button", name=re.compile(r"^Copy: "))).to_be_visible()
    gone = page.locator(f'tbody:has(tr[data-endpoint="{GONE}"])')
    expect(gone).to_have_class(re.compile(r"\bfailing\b"))
    expect(gone).to_contain_text("Failed")
    expect(gone.get_by_role("note")).to_contain_text("soon_gone.py")  # the condition's message
    expect(gone.get_by_role("note")).to_contain_text("not found")
    screenshot(page, "endpoints")

    page.set_viewport_size(PHONE)
    expect(gone.get_by_role("note")).to_be_visible()
    no_horizontal_scroll(page)
    screenshot(page, "phone-endpoints-list")
    for hash_ in ("#/new", "#/keys", f"#/endpoints/{console_dev.endpoint}/edit"):
        page.goto(f"{console_dev.url}/console/{hash_}")
        page.get_by_role("heading", level=1).wait_for()
        page.locator("form").first.wait_for()  # the page's own content, not only the shell
        no_horizontal_scroll(page)
        screenshot(page, f"phone-{hash_[2:].replace('/', '-')}")
    assert_clean(page, allow=EXPECTED)


def test_edit_shows_the_diff_and_restarts_then_applies_and_delete_needs_the_name(page, console_dev):
    create_by_api(console_dev, "to-edit")
    signed_in(page, console_dev, "#/endpoints/to-edit/edit")
    page.get_by_label("Workers max").fill("7")
    page.get_by_label("Execution timeout (s)").fill("120")
    page.get_by_role("button", name="Review changes").click()
    diff = page.get_by_role("table")
    expect(diff).to_contain_text("workersMax")
    expect(diff.get_by_role("row", name=re.compile("workersMax"))).to_contain_text("3")
    expect(diff.get_by_role("row", name=re.compile("workersMax"))).to_contain_text("7")
    expect(page.get_by_role("note")).to_contain_text("executionTimeoutMs")  # rolls pods on k8s
    screenshot(page, "edit-diff")
    assert record(console_dev, "to-edit").json()["workersMax"] == 3  # nothing saved yet

    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_text(re.compile(r"^Saved: .*workersMax 3 → 7"))).to_be_visible()
    saved = record(console_dev, "to-edit").json()
    assert (saved["workersMax"], saved["executionTimeoutMs"]) == (7, 120000)

    page.get_by_label("Template, handler file or command").fill("tests/handlers/sync_echo.py")
    page.get_by_role("button", name="Review changes").click()
    expect(page.get_by_role("note")).to_contain_text("Workers restart")
    page.keyboard.press("Escape")  # back to the form, nothing saved
    expect(page.get_by_role("button", name="Save changes")).to_have_count(0)

    delete = page.get_by_role("button", name="Delete endpoint")
    expect(delete).to_be_disabled()
    page.get_by_label("Type to-edit to confirm").fill("to-edi")
    expect(delete).to_be_disabled()
    page.get_by_label("Type to-edit to confirm").fill("to-edit")
    expect(delete).to_be_enabled()
    delete.click()
    page.wait_for_url(re.compile(r"#/endpoints$"))
    expect(page.locator('tr[data-endpoint="to-edit"]')).to_have_count(0)
    assert record(console_dev, "to-edit").status_code == 404
    assert_clean(page, allow=EXPECTED)


def test_api_keys_are_shown_once_and_a_revoked_key_gets_401(page, console_dev):
    health = f"{console_dev.url}/v2/{console_dev.endpoint}/health"
    signed_in(page, console_dev, "#/keys")
    page.get_by_label("Name").fill("bad name")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("alert")).to_contain_text("name: 1 to 128 characters: letters, digits")
    assert "[A-Za-z" not in page.get_by_role("alert").inner_text()  # words, not the regex

    page.get_by_label("Name").fill("console-ci")
    page.get_by_role("button", name="Create key").click()
    shown = page.get_by_label("The new key")
    expect(shown).to_have_text(re.compile(r"^lg_"))
    key = shown.inner_text()
    expect(page.get_by_role("button", name=re.compile(r"^Copy key: "))).to_be_visible()
    row = page.locator('tr[data-key="console-ci"]')
    expect(row).to_contain_text("jobs")
    screenshot(page, "keys")
    assert requests.get(health, headers=auth(console_dev, key), timeout=10).status_code == 200

    page.reload()
    expect(row).to_be_visible()
    assert key not in page.content()  # shown once: the list never has it

    row.get_by_role("button", name="Revoke console-ci").click()
    row.get_by_role("button", name="Cancel").click()
    expect(row).to_be_visible()
    row.get_by_role("button", name="Revoke console-ci").click()
    row.locator("button.danger", has_text="Revoke console-ci").click()
    expect(row).to_have_count(0)
    assert requests.get(health, headers=auth(console_dev, key), timeout=10).status_code == 401
    assert_clean(page, allow=EXPECTED)


@pytest.mark.parametrize(
    ("changed", "restarts"),
    [
        (["workersMax", "idleTimeout", "scalerValue", "name"], []),
        (["templateId"], [["templateId", "everywhere"]]),
        (["modelReferences", "name"], [["modelReferences", "everywhere"]]),
        (["gpuTypeIds", "workersMin"], [["gpuTypeIds", "kubernetes"]]),
        (
            ["executionTimeoutMs", "flashboot"],
            [["executionTimeoutMs", "kubernetes"], ["flashboot", "kubernetes"]],
        ),
    ],
)
def test_the_edit_page_knows_which_changes_restart_workers(page, console_dev, changed, restarts):
    page.goto(f"{console_dev.url}/console/")
    got = page.evaluate(
        """async (fields) => {
            const form = await import("./pages/form.js");
            return form.restarts(fields.map((field) => ({field}))).map((r) => [r.field, r.where]);
        }""",
        changed,
    )
    assert got == restarts


def test_jobs_per_minute_and_failures_come_from_the_history(page, console_dev):
    page.goto(f"{console_dev.url}/console/")
    points = [
        {"t": 1000 + 10 * i, "completed": 2, "failed": int(i == 0), "timedOut": int(i == 11)}
        for i in range(12)
    ]
    got = page.evaluate(
        """async (points) => {
            const list = await import("./pages/endpoints.js");
            return [list.throughput({interval: 10, points}), list.throughput({points: []})];
        }""",
        points,
    )
    # the last minute is the last 6 points (t in (1050, 1110]); failures (timed out too)
    # count the hour
    assert got == [{"perMin": 13, "failed": 2}, None]


MANY = 53  # more than one page of the list (50)


def listed(dev: DevProcess, query: str) -> list[str]:
    """The ids `GET /v1/endpoints?{query}` gives, all pages."""
    got, token = [], ""
    while True:
        url = f"{dev.url}/v1/endpoints?{query}&limit=20&view=summary&continue={token}"
        answer = requests.get(url, headers=auth(dev), timeout=10)
        assert answer.status_code == 200, answer.text
        got += [r["id"] for r in answer.json()]
        token = answer.headers.get("X-Continue", "")
        if not token:
            return got


def test_the_endpoint_list_pages_and_filters_by_name_and_phase(page, console_dev):
    made = [f"many-{i:02d}" for i in range(MANY)]
    for i, endpoint_id in enumerate(made):
        body = {"id": endpoint_id, "templateId": ECHO, "name": "LLM" if i % 10 == 0 else ""}
        answer = requests.post(
            f"{console_dev.url}/v1/endpoints", json=body, headers=auth(console_dev)
        )
        assert answer.status_code == 200, answer.text
    rows = page.locator("tr[data-endpoint]")
    try:
        signed_in(page, console_dev)
        everything = listed(console_dev, "")
        expect(rows).to_have_count(50)  # one page
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.endpoint)") == everything[:50]
        expect(page.get_by_text("50 endpoints, more follow")).to_be_visible()
        page.get_by_role("button", name="Show 50 more").click()
        expect(rows).to_have_count(len(everything))
        expect(page.get_by_role("button", name="Show 50 more")).to_have_count(0)

        page.get_by_label("Name or id").fill("llm")
        llm = listed(console_dev, "name=llm")
        assert llm == [f"many-{i:02d}" for i in range(0, MANY, 10)]
        expect(rows).to_have_count(len(llm))
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.endpoint)") == llm
        assert page.evaluate("location.hash") == "#/endpoints?name=llm"
        page.get_by_label("Phase").select_option("Failed")
        expect(page.get_by_text("No endpoint matches these filters.")).to_be_visible()
        page.get_by_label("Name or id").fill("")
        expect(rows).to_have_count(1)
        expect(page.locator(f'tr[data-endpoint="{GONE}"]')).to_contain_text("Failed")
        screenshot(page, "endpoints-filtered")

        page.reload()  # the filters are in the URL: a link or a reload keeps them
        expect(page.get_by_label("Phase")).to_have_value("Failed")
        expect(rows).to_have_count(1)
        assert_clean(page, allow=EXPECTED)
    finally:
        for endpoint_id in made:
            requests.delete(
                f"{console_dev.url}/v1/endpoints/{endpoint_id}", headers=auth(console_dev)
            )
