"""Issue 50 in the console, in Chromium against a real `lockgate dev` and the real runpod
SDK: a failed job's error reads as lines with its traceback folded (not a JSON string), the
test runner says why a job waits (`/health`'s `waiting`), the Requests list shows a job the
SDK sent without a reload and agrees with the runner, a handler's `progress_update` shows
while the job runs, and the Create form reports every problem at once beside its fields,
in its own labels."""

from __future__ import annotations

import re

import pytest
import requests
import runpod

from console_browser import assert_clean, create_endpoint, screenshot, sign_in

pytest_plugins = ["console_fixtures"]

EXPECTED = ("400", "404", "429")  # an API's expected refusal, logged as a failed load


@pytest.fixture(scope="module")
def endpoints(console_dev) -> dict[str, str]:
    specs = {
        "trouble": {"templateId": "tests/workers/runpod_trouble.py", "workersMax": 1},
        "parked": {"templateId": "examples/echo/handler.py", "workersMax": 0},
        "progress": {"templateId": "tests/workers/runpod_progress.py", "workersMax": 1},
    }
    for name, spec in specs.items():
        create_endpoint(console_dev, name, **spec)
    return {"echo": console_dev.endpoint, **{name: name for name in specs}}


@pytest.fixture
def sdk(console_dev):
    """The runpod SDK pointed at `lockgate dev`."""
    before = runpod.endpoint_url_base, runpod.api_key
    runpod.endpoint_url_base, runpod.api_key = f"{console_dev.url}/v2", console_dev.key
    yield runpod
    runpod.endpoint_url_base, runpod.api_key = before


def open_tab(page, dev, endpoint: str) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/endpoints/{endpoint}/requests")
    page.get_by_label("Request body (JSON)").wait_for()
    page.get_by_role("table", name="Requests").wait_for()


def run_async(page, body: str) -> None:
    page.get_by_label("Request body (JSON)").fill(body)
    page.get_by_role("button", name="Run async").click()


def wait_status(page, status: str, timeout_ms: int = 60_000) -> None:
    page.locator(".live-job .badge", has_text=re.compile(f"^{status}$")).wait_for(
        timeout=timeout_ms
    )


def test_a_failed_jobs_traceback_reads_as_lines(page, console_dev, endpoints):
    open_tab(page, console_dev, endpoints["trouble"])
    run_async(page, '{"input": {"fail": "bad input"}}')  # the runpod SDK's handler raises
    wait_status(page, "FAILED", timeout_ms=90_000)
    error = page.locator(".live-job .job-error")
    assert error.locator(".job-error-line").inner_text() == "ValueError: bad input"
    assert "\\n" not in error.inner_text() and "error_type" not in error.inner_text()
    trace = error.locator("details.traceback")
    assert trace.get_attribute("open") is None  # folded
    trace.locator("summary").click()
    lines = trace.locator("pre").inner_text().splitlines()
    assert lines[0].startswith("Traceback") and lines[-1] == "ValueError: bad input", lines
    screenshot(page, "requests-failed-traceback")
    job_id = page.locator(".live-job .mono").first.inner_text()
    row = page.locator(f'tr[data-job="{job_id}"]')
    row.locator(".job-error-line", has_text="ValueError: bad input").wait_for()
    assert "error_traceback" not in row.inner_text()
    assert_clean(page, allow=EXPECTED)


def test_the_runner_says_why_a_job_waits_with_max_workers_0(page, console_dev, endpoints):
    open_tab(page, console_dev, endpoints["parked"])
    run_async(page, '{"input": {"stuck": true}}')
    note = page.get_by_role("status").filter(has_text="max workers is 0: no worker will start")
    note.wait_for(timeout=30_000)
    assert "cold start" not in page.locator(".live-job").inner_text()
    screenshot(page, "requests-waiting-max-0")
    job_id = page.locator(".live-job .mono").first.inner_text()
    # the Endpoints list and the Overview say it too, not only a Ready badge and a count
    page.goto(f"{console_dev.url}/console/#/endpoints")
    row = page.locator('tr[data-endpoint="parked"]')
    row.locator(".waiting", has_text="max workers is 0: no worker will start").wait_for()
    page.goto(f"{console_dev.url}/console/#/endpoints/parked")
    page.get_by_role("status").filter(has_text="Queued jobs wait: max workers is 0").wait_for()
    screenshot(page, "overview-waiting-max-0")
    cancelled = requests.post(
        f"{console_dev.url}/v2/parked/cancel/{job_id}", headers=console_dev.headers(), timeout=10
    )
    assert cancelled.status_code == 200, cancelled.text
    assert_clean(page, allow=EXPECTED)


def test_a_job_sent_with_the_runpod_sdk_shows_in_the_list_by_itself(
    page, console_dev, endpoints, sdk
):
    open_tab(page, console_dev, endpoints["echo"])
    page.get_by_text("Updated every few seconds").wait_for()
    job = sdk.Endpoint(endpoints["echo"]).run({"from": "the runpod SDK"})
    assert job.output(timeout=60) == {"echo": {"from": "the runpod SDK"}}
    row = page.locator(f'tr[data-job="{job.job_id}"]')
    row.wait_for(timeout=30_000)  # no reload, no click on Refresh
    row.locator(".badge", has_text="COMPLETED").wait_for(timeout=30_000)
    screenshot(page, "requests-live-list")
    assert_clean(page, allow=EXPECTED)


def test_progress_update_shows_while_the_job_runs(page, console_dev, endpoints, tmp_path):
    release = tmp_path / "release"
    open_tab(page, console_dev, endpoints["progress"])
    run_async(page, f'{{"input": {{"release": "{release}"}}}}')
    progress = page.get_by_label("Progress", exact=True)
    progress.filter(has_text='"step":2').wait_for(timeout=90_000)
    assert page.locator(".live-job .badge").first.inner_text() == "IN_PROGRESS"
    job_id = page.locator(".live-job .mono").first.inner_text()
    # the list and the runner agree: the list shows the job running, by itself
    page.locator(f'tr[data-job="{job_id}"] .badge', has_text="IN_PROGRESS").wait_for(timeout=30_000)
    screenshot(page, "requests-progress")
    release.touch()
    wait_status(page, "COMPLETED")
    assert '"done"' in page.get_by_label("Output", exact=True).inner_text()
    page.locator(f'tr[data-job="{job_id}"] .badge', has_text="COMPLETED").wait_for(timeout=30_000)
    assert_clean(page, allow=EXPECTED)


def test_the_create_form_reports_every_problem_at_once_in_its_labels(page, console_dev):
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/new")
    page.get_by_label("Endpoint id").fill("Not An Id")
    page.get_by_label("Template, handler file or command").fill("examples/echo/handler.py")
    page.get_by_label("Workers max").fill("-1")
    page.get_by_label("Idle timeout (s)").fill("-5")
    page.get_by_label("Scaler value").fill("0")
    page.get_by_role("button", name="Create endpoint").click()
    summary = page.locator(".form-errors")
    summary.wait_for()
    text = summary.inner_text()
    assert "4 problems" in text, text
    for label in ("Endpoint id", "Workers max", "Idle timeout (s)", "Scaler value"):
        assert f"{label}: " in text, text
    for api_name in ("workersMax", "idleTimeout", "scalerValue", "Value error", "body:"):
        assert api_name not in text, text
    for field in ("id", "workersMax", "idleTimeout", "scalerValue"):
        place = page.locator(f'[data-field="{field}"]')
        assert place.locator(".field-error").count() == 1, field
        assert place.locator(f'[name="{field}"]').get_attribute("aria-invalid") == "true"
    screenshot(page, "create-every-problem")

    # a check across fields comes in the same answer as the fields' own problems, in the
    # form's words, beside the first field it names
    page.get_by_label("Workers max").fill("1")
    page.get_by_label("Workers min").fill("3")
    page.get_by_role("button", name="Create endpoint").click()
    summary.filter(has_text="must not exceed").wait_for()
    text = summary.inner_text()
    assert "4 problems" in text, text
    assert "Workers min (3) must not exceed Workers max (1)" in text, text
    assert "Endpoint id: " in text and "Idle timeout (s): " in text, text
    error = page.locator('[data-field="workersMin"] .field-error')
    assert error.inner_text() == "Workers min (3) must not exceed Workers max (1)"
    assert page.locator(".field-error").count() == 4
    screenshot(page, "create-every-problem-across-fields")

    # with the fields fixed, the check across fields is the one problem left
    page.get_by_label("Endpoint id").fill("fine-id")
    page.get_by_label("Idle timeout (s)").fill("5")
    page.get_by_label("Scaler value").fill("4")
    page.get_by_role("button", name="Create endpoint").click()
    summary.filter(has_text="1 problem:").wait_for()
    assert error.inner_text() == "Workers min (3) must not exceed Workers max (1)"
    assert page.locator(".field-error").count() == 1
    assert_clean(page, allow=EXPECTED)


def test_the_runner_says_a_job_waits_behind_a_busy_worker_at_the_max(
    page, console_dev, endpoints, tmp_path
):
    release = tmp_path / "release"
    ep = endpoints["progress"]  # workersMax 1; a job holds its worker until `release` exists
    first = requests.post(
        f"{console_dev.url}/v2/{ep}/run",
        json={"input": {"release": str(release)}},
        headers=console_dev.headers(),
        timeout=10,
    ).json()
    open_tab(page, console_dev, ep)
    page.locator(f'tr[data-job="{first["id"]}"] .badge', has_text="IN_PROGRESS").wait_for(
        timeout=90_000
    )
    queued = requests.post(  # one job ahead of the runner's in the queue
        f"{console_dev.url}/v2/{ep}/run",
        json={"input": {"release": str(release)}},
        headers=console_dev.headers(),
        timeout=10,
    )
    assert queued.json()["status"] == "IN_QUEUE", queued.text
    run_async(page, f'{{"input": {{"release": "{release}"}}}}')
    # its place, from /status?position=1 (the queue's count alone comes from /health)
    note = page.get_by_role("status").filter(has_text="position 2 of 2 in the queue")
    note.wait_for(timeout=30_000)
    assert "1 worker busy, max reached (1)" in note.inner_text()
    screenshot(page, "requests-waiting-busy")
    release.touch()
    wait_status(page, "COMPLETED", timeout_ms=90_000)
    assert_clean(page, allow=EXPECTED)
