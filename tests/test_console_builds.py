"""The console's side of building from git (issue 48 items 4-6), in Chromium against a real
`lockgate dev` (tests/console_fixtures.py) whose builds are real (a `file://` checkout and
its environment, dev/builder.py):

- Create from a ready-to-deploy repository offered by the catalogue
  (LOCKGATE_CONSOLE_CATALOGUE): its hub.json's inputs rendered with their defaults and
  bounds, the advanced one folded, a preset applied, the endpoint created with the
  repository as its source and the inputs as its env, its first build started;
- the Builds tab: the list, a build's log followed live to its end, a second build
  started with the form, and a rollback to the first build through its GIT_BUILD release;
- Cancel of a build that cannot end by itself (a git server that never answers);
- the source fields of Edit."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in
from devproc import DevProcess
from tests.conftest import wait_until
from tests.gitrepo import commit
from tests.hubrepos import HANDLER, hub_repo

pytest_plugins = ["console_fixtures"]

TITLE = "Tiny echo LLM (catalogue)"


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hub_repo(tmp_path_factory.mktemp("hub") / "repo")


@pytest.fixture(scope="module")
def hub_dev(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Iterator[DevProcess]:
    """`lockgate dev` offering `repo` in its console catalogue."""
    catalogue = [{"url": f"file://{repo}", "ref": "main", "title": TITLE}]
    dev = DevProcess(
        "examples/echo/handler.py", data_dir=tmp_path_factory.mktemp("hub-dev"),
        env={"LOCKGATE_CONSOLE_CATALOGUE": json.dumps(catalogue)},
    )  # fmt: skip
    dev.start()
    yield dev
    dev.stop()


def call(dev: DevProcess, method: str, path: str, body: dict | None = None) -> dict:
    answer = requests.request(
        method, f"{dev.url}{path}", json=body, headers=dev.headers(), timeout=70
    )
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def builds(dev: DevProcess, endpoint_id: str) -> list[dict]:
    return call(dev, "GET", f"/v2/serverless/{endpoint_id}/builds")["builds"]


def run(dev: DevProcess, endpoint_id: str) -> dict:
    """A job's output, run through the job API."""
    job = call(dev, "POST", f"/v2/{endpoint_id}/runsync?wait=60000", {"input": {}})
    assert job["status"] == "COMPLETED", job
    return job["output"]


def test_create_from_a_repository_then_build_follow_and_roll_back(page, hub_dev, repo) -> None:
    dev = hub_dev
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/new")
    page.get_by_role("link", name="deploy a ready-to-deploy repository").click()
    page.get_by_role("button", name=TITLE).click()

    # the form hub.json describes
    form = page.locator("form.hub-form")
    expect(form.get_by_role("heading", name="Tiny echo LLM")).to_be_visible()
    expect(form).to_contain_text("A listing made by lockgate's tests")
    model, tokens = form.get_by_label("Model"), form.get_by_label("Max tokens (16 to 8192)")
    expect(model).to_have_value("org/small")
    expect(tokens).to_have_value("512")
    expect(tokens).to_have_attribute("max", "8192")
    quant = form.get_by_label("Quantization")
    expect(quant).to_be_hidden()  # advanced: folded
    expect(form.get_by_label("GPU pools")).to_have_value("AMPERE_24")
    expect(form.get_by_label("Excluded GPU types")).to_have_value("NVIDIA GeForce RTX 3090")
    expect(form.get_by_label("GPUs per worker")).to_have_value("2")
    expect(form.get_by_label("CUDA versions")).to_have_value("12.4, 12.1")
    expect(form.get_by_label("Container disk (GiB)")).to_have_value("30")
    expect(form).to_contain_text("FIXED_VAR=always")
    tokens.fill("9000")
    form.get_by_role("button", name="Create endpoint").click()
    expect(form.get_by_role("alert")).to_have_text("Max tokens: 9000 is above 8192")
    form.get_by_label("Preset").select_option("Big model")
    expect(model).to_have_value("org/big")
    expect(tokens).to_have_value("4096")
    form.get_by_text("Advanced settings (1)").click()
    quant.select_option(label="AWQ")
    screenshot(page, "hub-create-form")

    form.get_by_role("button", name="Create endpoint").click()
    page.wait_for_url(re.compile(r"#/endpoints/[a-z0-9]+/builds$"))
    endpoint_id = page.url.split("/endpoints/")[1].split("/")[0]
    made = call(dev, "GET", f"/v2/serverless/{endpoint_id}")
    assert made["source"]["git"]["url"] == f"file://{repo}"
    assert made["source"]["git"]["ref"] == "main"
    assert (made["gpu"]["count"], made["gpu"]["pools"]) == (2, ["AMPERE_24"])
    template = call(dev, "GET", f"/v1/endpoints/{endpoint_id}?includeTemplate=true")["template"]
    env = {"FIXED_VAR": "always", "MODEL_NAME": "org/big", "MAX_TOKENS": "4096", "QUANTIZE": "awq"}
    assert template["env"] == env
    assert template["containerDiskInGb"] == 30

    # the Builds tab: the first build, the one the create started by itself (the console
    # asks for none: one build, not two), and its log to the end
    table = page.get_by_role("table", name="Builds")
    [first] = builds(dev, endpoint_id)
    assert first["reason"] == "CREATE", first
    row = table.locator(f'tr[data-build="{first["id"]}"]')
    row.get_by_role("button", name=f"Log of {first['id']}").click()
    log = page.get_by_role("log", name="Build log lines")
    expect(page.get_by_role("status").filter(has_text="Ended: COMPLETED")).to_be_visible(
        timeout=90_000
    )
    expect(log).to_contain_text(first["id"][:6])
    expect(row).to_have_attribute("data-status", "COMPLETED")
    expect(row.locator(".running")).to_be_visible(timeout=20_000)
    settings = {"model": "org/big", "tokens": "4096", "quant": "awq", "fixed": "always"}
    wait_until(lambda: run(dev, endpoint_id) == {**settings, "revision": 1}, timeout=60)

    # a second commit, built with the form; its log is followed from the start
    commit(repo, {"handler.py": HANDLER.replace("REVISION = 1", "REVISION = 2")}, "revision 2")
    page.get_by_label("Branch, tag or commit (optional)").fill("main")
    page.get_by_role("button", name="Start a build").click()
    wait_until(lambda: len(builds(dev, endpoint_id)) == 2)
    second = builds(dev, endpoint_id)[0]
    expect(page.locator(".build-log h2")).to_contain_text(second["id"])
    expect(page.get_by_role("status").filter(has_text="Ended: COMPLETED")).to_be_visible(
        timeout=90_000
    )
    expect(log).to_contain_text("revision 2")  # the commit message, in the checkout's lines
    expect(table.locator(f'tr[data-build="{second["id"]}"] .running')).to_be_visible(timeout=20_000)
    screenshot(page, "builds-tab")
    wait_until(lambda: run(dev, endpoint_id) == {**settings, "revision": 2}, timeout=60)

    # roll back to the first build through its GIT_BUILD release
    row.get_by_role("button", name=f"Roll back to {first['id']}").click()
    dialog = page.get_by_role("dialog", name="Roll back to this build?")
    expect(dialog).to_contain_text(f"switch to build {first['id']}")
    dialog.get_by_role("button", name="Roll back", exact=True).click()
    expect(row.locator(".running")).to_be_visible(timeout=20_000)
    newest = call(dev, "GET", f"/v2/serverless/{endpoint_id}/releases")["releases"][0]
    assert (newest["source"], newest["buildId"]) == ("GIT_BUILD", first["id"])
    screenshot(page, "builds-rolled-back")
    wait_until(lambda: run(dev, endpoint_id) == {**settings, "revision": 1}, timeout=60)

    # the Releases tab shows the GIT_BUILD releases
    page.get_by_role("link", name="Releases").click()
    expect(page.get_by_role("table", name="Releases").locator("tbody tr").first).to_contain_text(
        first["id"]
    )
    screenshot(page, "releases-git-build")
    assert_clean(page)


class Silent(BaseHTTPRequestHandler):
    """A git server that never answers while `hold` is set: a clone from it stays under
    way, and its build BUILDING, until the test lets it go."""

    hold = threading.Event()

    def do_GET(self) -> None:  # http.server's name
        self.hold.wait(60)
        self.send_response(503)
        self.end_headers()

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def silent_git() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    Silent.hold.clear()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/org/repo.git"
    Silent.hold.set()
    server.shutdown()
    server.server_close()


def test_cancel_a_build_and_edit_the_source(page, hub_dev, silent_git) -> None:
    dev = hub_dev
    ep = call(dev, "POST", "/v2/serverless", {
        "name": "stuck", "type": "QUEUE", "image": "python:3.12-slim",
        "args": "python -u examples/echo/handler.py", "cpu": [{"id": "cpu3c", "vcpuCount": 2}],
        "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
        "source": {"git": {"url": silent_git, "trigger": "MANUAL"}},
    })  # fmt: skip
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/endpoints/{ep['id']}")
    page.get_by_role("link", name="Builds").click()  # shown: the endpoint has a source
    expect(page.get_by_text("No build yet")).to_be_visible()
    page.get_by_role("button", name="Start a build").click()
    wait_until(lambda: builds(dev, ep["id"]) and builds(dev, ep["id"])[0]["status"] == "BUILDING")
    build = builds(dev, ep["id"])[0]
    row = page.get_by_role("table", name="Builds").locator(f'tr[data-build="{build["id"]}"]')
    expect(row).to_have_attribute("data-status", "BUILDING")
    row.get_by_role("button", name=f"Cancel {build['id']}").click()
    expect(row).to_have_attribute("data-status", "CANCELLED")
    expect(row.get_by_role("button", name=f"Cancel {build['id']}")).to_have_count(0)
    assert builds(dev, ep["id"])[0]["status"] == "CANCELLED"
    screenshot(page, "builds-cancelled")

    # Edit: the source's fields, a changed ref saved through the review
    page.get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Build the worker from a git repository")).to_be_checked()
    expect(page.get_by_label("Repository URL")).to_have_value(silent_git)
    expect(page.get_by_label("Builds on")).to_have_value("MANUAL")
    page.get_by_label("Branch, tag or commit").fill("release")
    page.get_by_label("Build time limit (min)").fill("15")
    page.get_by_role("button", name="Review changes").click()
    review = page.locator(".review")
    expect(review).to_contain_text("source")
    expect(review).to_contain_text(f"git {silent_git}@release, on MANUAL, 15 min")
    screenshot(page, "edit-source")
    review.get_by_role("button", name="Save changes").click()
    expect(page.get_by_text("Saved:")).to_be_visible()
    git = call(dev, "GET", f"/v2/serverless/{ep['id']}")["source"]["git"]
    assert (git["ref"], git["buildTimeoutMin"], git["trigger"]) == ("release", 15, "MANUAL")
    assert_clean(page, allow=("409",))


def test_a_bad_repository_url_is_said_on_the_form(page, hub_dev, tmp_path) -> None:
    sign_in(page, hub_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{hub_dev.url}/console/#/new?from=repository")
    page.get_by_label("Repository URL").fill(f"file://{tmp_path}/nothing")
    page.get_by_role("button", name="Read hub.json").click()
    expect(page.get_by_role("alert")).to_contain_text("cannot fetch its default branch")
    screenshot(page, "hub-bad-url")
    assert_clean(page, allow=("422",))


def test_create_with_a_git_source_and_the_builds_tab_at_phone_width(page, hub_dev, repo) -> None:
    sign_in(page, hub_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{hub_dev.url}/console/#/new")
    page.get_by_label("Endpoint id").fill("from-git")
    page.get_by_label("Template, handler file or command").fill("examples/echo/handler.py")
    page.get_by_label("Build the worker from a git repository").check()
    page.get_by_label("Repository URL").fill(f"file://{repo}")
    page.get_by_label("Builds on").select_option("PUSH")
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("heading", name=re.compile("Creat(ing|ed) from-git")).wait_for()
    git = call(hub_dev, "GET", "/v2/serverless/from-git")["source"]["git"]
    assert (git["url"], git["ref"], git["trigger"]) == (f"file://{repo}", "", "PUSH")
    [build] = builds(hub_dev, "from-git")  # created with a source: built at once
    assert build["reason"] == "CREATE", build

    page.set_viewport_size(PHONE)
    page.goto(f"{hub_dev.url}/console/#/endpoints/from-git/builds")
    row = page.get_by_role("table", name="Builds").locator("tbody tr").first
    expect(row).to_have_attribute("data-status", "COMPLETED", timeout=90_000)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    screenshot(page, "builds-phone")
    assert_clean(page)
