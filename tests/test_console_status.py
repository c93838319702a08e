"""The console tells the truth about an endpoint and how to call it, in Chromium against a
real `lockgate dev`: a handler that raises at import shows "Crash loop" (not green Ready) on
the list and the Overview, and the test runner says the workers are crashing, with a link to
the logs; the copied job API URL and the Overview's snippets reach the real job API."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
import requests
from examples.openai.responder import DEFAULT_MAX_TOKENS, generate, message_text

from console_browser import PHONE, assert_clean, create_endpoint, screenshot, sign_in
from devproc import REPO
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

EXPECTED = ("404", "429")


def signed_in(page, dev) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))


@pytest.fixture(scope="module")
def crashing(console_dev):
    """An endpoint whose handler raises at import: each worker it starts exits at once."""
    create_endpoint(
        console_dev, "crashing", templateId="tests/handlers/import_error.py", workersMax=1
    )
    yield "crashing"
    requests.delete(
        f"{console_dev.url}/v1/endpoints/crashing", headers=console_dev.headers(), timeout=30
    )


def test_a_crash_loop_is_said_in_the_runner_the_list_and_the_overview(page, console_dev, crashing):
    signed_in(page, console_dev)
    page.goto(f"{console_dev.url}/console/#/endpoints/{crashing}/requests")
    page.get_by_label("Request body (JSON)").wait_for()
    page.get_by_role("button", name="Run async").click()
    # no worker yet: at first a cold start, then (second quick exit) the truth
    note = page.locator(".live-job .crashing")
    note.wait_for(timeout=90_000)
    text = note.inner_text()
    assert "Workers are crashing" in text and "cold start" not in text
    assert "exit code" in text  # the WorkersHealthy condition's message
    link = note.get_by_role("link", name="See the worker logs")
    assert link.get_attribute("href") == f"#/endpoints/{crashing}/logs"
    # the list shows the queued job without waiting for its end (nor a Refresh click)
    job_id = page.locator(".live-job .mono").first.inner_text()
    page.locator(f'tr[data-job="{job_id}"]', has_text="IN_QUEUE").wait_for()
    screenshot(page, "requests-crash-loop")

    page.goto(f"{console_dev.url}/console/#/endpoints")
    row = page.locator(f'tr[data-endpoint="{crashing}"]')
    badge = row.locator(".badge").first
    badge.wait_for()
    wait_until(lambda: badge.inner_text() == "Crash loop", "the list's Crash loop badge")
    assert "bad" in badge.get_attribute("class")
    ready = page.locator(f'tr[data-endpoint="{console_dev.endpoint}"] .badge').first
    assert ready.inner_text() == "Ready"
    screenshot(page, "endpoints-crash-loop")

    page.goto(f"{console_dev.url}/console/#/endpoints/{crashing}")
    head = page.locator("#summary .badge")
    head.wait_for()
    wait_until(lambda: head.inner_text() == "Crash loop", "the Overview's Crash loop badge")
    assert "bad" in head.get_attribute("class")
    screenshot(page, "overview-crash-loop")
    assert_clean(page, allow=EXPECTED)


def test_the_phase_filter_goes_by_the_badge_a_crash_loop_is_not_ready(page, console_dev, crashing):
    queued = requests.post(
        f"{console_dev.url}/v2/{crashing}/run", json={"input": {}},
        headers=console_dev.headers(), timeout=30,
    )  # fmt: skip
    assert queued.status_code == 200, queued.text  # a queued job: workers start, and crash
    signed_in(page, console_dev)
    rows = page.locator("tr[data-endpoint]")
    badge = page.locator(f'tr[data-endpoint="{crashing}"] .badge').first
    badge.wait_for()
    wait_until(lambda: badge.inner_text() == "Crash loop", "the list's Crash loop badge")
    listed = "rs => rs.map(r => r.dataset.endpoint)"
    record = requests.get(
        f"{console_dev.url}/v1/endpoints/{crashing}", headers=console_dev.headers(), timeout=30
    ).json()
    assert record["status"]["phase"] == "Ready"  # what the API's own phase filter goes by

    page.get_by_label("Phase").select_option("Ready")
    page.locator(f'tr[data-endpoint="{console_dev.endpoint}"]').wait_for()
    wait_until(lambda: crashing not in rows.evaluate_all(listed), "crashing left out of Ready")
    phases = page.locator('tr[data-endpoint] td[data-label="Phase"] .badge')
    wait_until(lambda: set(phases.all_inner_texts()) == {"Ready"}, "only Ready badges")
    assert page.evaluate("location.hash") == "#/endpoints?phase=Ready"

    page.get_by_label("Phase").select_option("failing")
    wait_until(lambda: rows.evaluate_all(listed) == [crashing], "only the crashing endpoint")
    assert page.evaluate("location.hash") == "#/endpoints?phase=failing"
    screenshot(page, "endpoints-filter-workers-failing")
    page.reload()  # the choice is in the URL
    wait_until(lambda: page.get_by_label("Phase").input_value() == "failing", "the choice")
    wait_until(lambda: rows.evaluate_all(listed) == [crashing], "the filter kept on reload")
    assert_clean(page, allow=EXPECTED)


def test_a_healthy_endpoint_reads_ready_and_its_runner_says_cold_start_not_crash(page, console_dev):
    create_endpoint(console_dev, "parked-ok", templateId="examples/echo/handler.py", workersMax=0)
    signed_in(page, console_dev)
    page.goto(f"{console_dev.url}/console/#/endpoints/parked-ok")
    head = page.locator("#summary .badge")
    head.wait_for()
    assert head.inner_text() == "Ready"
    page.goto(f"{console_dev.url}/console/#/endpoints/parked-ok/requests")
    page.get_by_label("Request body (JSON)").wait_for()
    page.get_by_role("button", name="Run async").click()
    page.get_by_role("status").filter(has_text="Workers are starting").wait_for()
    assert page.locator(".live-job .crashing").count() == 0
    assert_clean(page, allow=EXPECTED)


def test_the_copied_url_and_the_snippets_reach_the_job_api(page, console_dev):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    signed_in(page, console_dev)
    endpoint = console_dev.endpoint
    page.goto(f"{console_dev.url}/console/#/endpoints/{endpoint}")
    page.get_by_role("button", name=re.compile("^Copy URL")).click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert not copied.endswith("/"), copied
    answer = requests.post(
        f"{copied}/runsync",
        json={"input": {"copied": True}},
        headers=console_dev.headers(),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "COMPLETED"

    routes = page.get_by_role("table", name="Routes")
    assert f"Routes, after {copied}" in routes.inner_text()
    assert "/runsync" in routes.inner_text() and "/status/{jobId}" in routes.inner_text()

    curl = page.get_by_label("cURL snippet").inner_text()
    runsync = curl.splitlines()[0].replace("YOUR_API_KEY", console_dev.key)
    done = subprocess.run(shlex.split(runsync), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"status":"COMPLETED"' in done.stdout.replace(" ", ""), done.stdout

    page.get_by_role("tab", name="Python (runpod SDK)").click()
    python = page.get_by_label("Python (runpod SDK) snippet").inner_text()
    assert f'runpod.Endpoint("{endpoint}")' in python
    ran = subprocess.run(
        [sys.executable, "-c", python.replace("YOUR_API_KEY", console_dev.key)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    # run_sync's output, then the queued job's once it finished
    assert ran.stdout.count("{'echo': {'prompt': 'Hello'}}") == 2, ran.stdout

    page.get_by_role("tab", name="Python (requests)").click()
    plain = page.get_by_label("Python (requests) snippet").inner_text()
    ran = subprocess.run(
        [sys.executable, "-c", plain.replace("YOUR_API_KEY", console_dev.key)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "'status': 'COMPLETED'" in ran.stdout.splitlines()[0], ran.stdout

    page.get_by_role("tab", name="JavaScript (fetch)").click()
    javascript = page.get_by_label("JavaScript (fetch) snippet").inner_text()
    node = subprocess.run(
        ["node", "--input-type=module", "-e", javascript.replace("YOUR_API_KEY", console_dev.key)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert node.returncode == 0, node.stderr
    assert "COMPLETED" in node.stdout, node.stdout
    screenshot(page, "overview-snippets")
    assert_clean(page, allow=EXPECTED)


def test_the_openai_snippet_runs_with_the_openai_sdk_against_the_openai_route(page, console_dev):
    create_endpoint(
        console_dev, "openai-snip", templateId="examples/openai/handler.py", workersMax=1
    )
    try:
        signed_in(page, console_dev)
        page.goto(f"{console_dev.url}/console/#/endpoints/openai-snip")
        page.get_by_role("tab", name="Python (OpenAI SDK)").click()
        snippet = page.get_by_label("Python (OpenAI SDK) snippet").inner_text()
        assert f'base_url="{console_dev.url}/v2/openai-snip/openai/v1"' in snippet
        routes = page.get_by_role("table", name="Routes").inner_text()
        assert "/openai/v1/chat/completions" in routes
        ran = subprocess.run(
            [sys.executable, "-c", snippet.replace("YOUR_API_KEY", console_dev.key)],
            capture_output=True, text=True, timeout=180, cwd=REPO,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        hello = [{"role": "user", "content": "Hello"}]  # the toy model's answer, computed
        expected = "".join(generate(message_text(hello), DEFAULT_MAX_TOKENS)[0])
        assert ran.stdout.strip() == expected, ran.stdout
        screenshot(page, "overview-snippet-openai")
        assert_clean(page, allow=EXPECTED)
    finally:
        requests.delete(
            f"{console_dev.url}/v1/endpoints/openai-snip", headers=console_dev.headers(), timeout=30
        )


def test_dev_mode_is_known_and_its_meaningless_fields_are_folded_away(page, console_dev):
    about = requests.get(f"{console_dev.url}/v1/about", headers=console_dev.headers(), timeout=10)
    assert about.json() == {
        "mode": "dev",
        "commandLineEndpoint": console_dev.endpoint,
        "commandLineFields": ["templateId"],  # the fixture names no flag
        "catalogue": [],  # LOCKGATE_CONSOLE_CATALOGUE unset
    }
    assert requests.get(f"{console_dev.url}/v1/about", timeout=10).status_code == 401

    signed_in(page, console_dev)
    page.goto(f"{console_dev.url}/console/#/new")
    folded = page.locator("details.placement")
    folded.wait_for()
    assert "not used in dev mode" in folded.locator("summary").inner_text()
    assert not page.get_by_label("GPU types, in priority order").is_visible()
    assert not page.get_by_label("Data centres").is_visible()
    assert not page.get_by_label("vCPUs per worker").is_visible()
    assert not page.locator("#flashboot").is_visible()
    screenshot(page, "create-dev-mode")

    endpoint = console_dev.endpoint
    page.goto(f"{console_dev.url}/console/#/endpoints/{endpoint}")
    settings = page.get_by_role("region", name="Settings")
    settings.get_by_text("a local process (dev mode)").wait_for()
    assert "FlashBoot" not in settings.locator("dl").inner_text()
    assert "GPU" not in settings.locator("dl").inner_text()
    note = settings.get_by_role("note")
    assert "kept at the next lockgate dev start" in note.inner_text()
    assert "except" not in note.inner_text()  # no flag of the fixture's command line
    screenshot(page, "overview-dev-mode")

    page.goto(f"{console_dev.url}/console/#/endpoints/{endpoint}/edit")
    page.get_by_role("note").filter(has_text="lockgate dev command line").wait_for()
    create_endpoint(console_dev, "api-made", templateId="examples/echo/handler.py", workersMax=0)
    page.goto(f"{console_dev.url}/console/#/endpoints/api-made/edit")
    page.get_by_label("Workers max").wait_for()
    assert page.locator(".command-line-note").count() == 0  # only the command line's endpoint
    assert_clean(page, allow=EXPECTED)


def test_the_sign_in_hint_and_an_unknown_endpoint_read_cleanly(page, console_dev):
    page.goto(f"{console_dev.url}/console/")
    hint = page.locator("#key-help")
    hint.wait_for()
    assert "`" not in hint.inner_text()
    assert hint.locator("code", has_text="lockgate keys create --scope admin").count() == 1

    signed_in(page, console_dev)
    page.goto(f"{console_dev.url}/console/#/endpoints/no-such-endpoint")
    alert = page.get_by_role("alert").filter(has_text="not found")
    alert.wait_for()
    assert page.get_by_text("Loading…").count() == 0  # not under the error, for ever

    page.set_viewport_size(PHONE)  # every tab of an endpoint fits at phone width
    page.goto(f"{console_dev.url}/console/#/endpoints/{console_dev.endpoint}/edit")
    edit = page.get_by_role("navigation").get_by_role("link", name="Edit")
    edit.wait_for()
    box = edit.bounding_box()
    assert box and box["x"] + box["width"] <= PHONE["width"], box
    screenshot(page, "phone-tabs")
    assert_clean(page, allow=EXPECTED)


@pytest.mark.parametrize(
    ("phase", "condition", "unhealthy", "badge", "runner"),
    [
        ("Ready", None, 0, ["Ready", "ok"], None),
        ("Ready", ["CrashLoop", "exit code 1"], 1, ["Crash loop", "bad"], "Workers are crashing"),
        ("Ready", None, 2, ["Unhealthy", "bad"], "Workers are crashing"),
        ("Ready", ["ImagePullError", "no such image"], 1, ["Image pull error", "bad"],
         "Workers cannot start"),
        ("Ready", ["NoGpuCapacity", "no L4 free"], 0, ["No GPU capacity", "warn"],
         "Workers cannot start"),
        ("Failed", ["CrashLoop", "x"], 1, ["Failed", "bad"], "Workers are crashing"),
        ("Initializing", None, 0, ["Initializing", "warn"], None),
        ("Initializing", ["ModelFetchFailed", "acme/x: 401"], 1,
         ["Model download failed", "bad"], "Workers cannot start"),
    ],
)  # fmt: skip
def test_the_badge_and_the_runner_name_each_workers_healthy_cause(
    page, console_dev, phase, condition, unhealthy, badge, runner
):
    conditions = []
    if condition:
        reason, message = condition
        conditions = [
            {"type": "WorkersHealthy", "status": "False", "reason": reason, "message": message}
        ]
    record = {"status": {"phase": phase, "conditions": conditions}}
    health = {"workers": {"unhealthy": unhealthy}}
    page.goto(f"{console_dev.url}/console/")
    got = page.evaluate(
        """async ([record, health]) => {
            const state = await import("./pages/state.js");
            const s = state.endpointState(record, health);
            return [[s.label, s.tone], state.workersTrouble(record, health)];
        }""",
        [record, health],
    )
    assert got == [badge, runner]


@pytest.mark.parametrize(
    ("condition", "workers", "badge"),
    [
        # dev mode: ModelsCached False while downloading (its phase is already Ready)
        (["ModelsCached", "False", "Downloading", "Ready"], {}, ["Downloading models", "warn"]),
        # a cluster: WorkersHealthy True, DownloadingModels, while pods wait in fetch-models
        (["WorkersHealthy", "True", "DownloadingModels", "Initializing"], {"initializing": 2},
         ["Downloading models", "warn"]),
        # a worker already serves (a scale-up fetching for the new pod): the phase
        (["WorkersHealthy", "True", "DownloadingModels", "Ready"], {"idle": 1}, ["Ready", "ok"]),
        (["ModelsCached", "True", "Cached", "Ready"], {}, ["Ready", "ok"]),
    ],
)  # fmt: skip
def test_the_badge_says_models_are_downloading_while_no_worker_serves(
    page, console_dev, condition, workers, badge
):
    kind, status, reason, phase = condition
    record = {"status": {"phase": phase, "conditions": [
        {"type": kind, "status": status, "reason": reason, "message": "downloading acme/tiny"}
    ]}}  # fmt: skip
    page.goto(f"{console_dev.url}/console/")
    got = page.evaluate(
        """async ([record, health]) => {
            const s = (await import("./pages/state.js")).endpointState(record, health);
            return [s.label, s.tone];
        }""",
        [record, {"workers": workers}],
    )
    assert got == badge
