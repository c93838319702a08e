"""The console's Requests tab in Chromium against a real `lockgate dev`: the default test
request runs to COMPLETED with its output, an invalid one is not sent, a failing handler
shows its error (and its worker's log lines), a stream shows while the job runs, a running
job is cancelled from the list, the list pages and filters, and purge asks first."""

from __future__ import annotations

import re

import pytest
import requests

from console_browser import PHONE, assert_clean, create_endpoint, create_key, screenshot, sign_in
from tests.conftest import wait_until

pytest_plugins = ["console_fixtures"]

# An API's expected 4xx shows in the browser's console as a failed resource load; the logs
# API (/v1/endpoints/{id}/logs) is another helper's and answers 404 until it is merged.
EXPECTED = ("404", "429")


@pytest.fixture(scope="module")
def endpoints(console_dev) -> dict[str, str]:
    """Endpoints made through the management API, as a person would in the console."""
    made = {"echo": console_dev.endpoint}
    specs = {
        "raising": {"templateId": "tests/handlers/raising.py", "workersMax": 1},
        "streaming": {"templateId": "examples/streaming/handler.py", "workersMax": 1},
        "parked": {"templateId": "examples/echo/handler.py", "workersMax": 0},
        "dies-once": {"templateId": "python tests/handlers/sleeper.py async", "workersMax": 1},
    }
    for name, spec in specs.items():
        create_endpoint(console_dev, name, **spec)
        made[name] = name
    return made


def open_tab(page, dev, endpoint: str) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/endpoints/{endpoint}/requests")
    page.get_by_label("Request body (JSON)").wait_for()
    page.get_by_role("table", name="Requests").wait_for()


def live_status(page) -> str:
    return page.locator(".live-job .badge").first.inner_text()


def wait_status(page, status: str, timeout_ms: int = 60_000) -> None:
    page.locator(".live-job .badge", has_text=re.compile(f"^{status}$")).wait_for(
        timeout=timeout_ms
    )


def listed(dev, endpoint: str, query: str = "") -> list[dict]:
    """The endpoint's jobs through the API (waiting out its 10-per-10-s limit, which the
    console's calls with the same key share)."""
    url = f"{dev.url}/v2/{endpoint}/requests{query}"
    r = wait_until(
        lambda: (x := requests.get(url, headers=dev.headers(), timeout=10)).status_code != 429 and x
    )
    assert r.status_code == 200, r.text
    return r.json()["items"]


def test_the_default_request_runs_to_completed_and_bad_json_is_not_sent(
    page, console_dev, endpoints
):
    open_tab(page, console_dev, endpoints["echo"])
    body = page.get_by_label("Request body (JSON)")
    assert '"input"' in body.input_value()
    page.get_by_role("button", name="Run", exact=True).click()
    wait_status(page, "COMPLETED")
    output = page.get_by_label("Output", exact=True)
    assert "Hello from the lockgate console" in output.inner_text()
    assert re.search(r"delay .+ · execution .+", page.locator(".live-job").inner_text())
    job_id = page.locator(".live-job .mono").first.inner_text()
    assert job_id.startswith("sync-")
    page.locator(f'tr[data-job="{job_id}"]').wait_for()
    assert page.locator(".live-job").get_by_role("button", name="Cancel").count() == 0
    screenshot(page, "requests-completed")

    before = len(listed(console_dev, endpoints["echo"]))
    body.fill('{"input": {oops}')
    page.get_by_role("button", name="Run async").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "not valid JSON" in alert.inner_text() and "Nothing was sent" in alert.inner_text()
    assert len(listed(console_dev, endpoints["echo"])) == before

    body.fill('{"input": {"remembered": true}}')
    page.reload()
    page.get_by_label("Request body (JSON)").wait_for()
    assert "remembered" in page.get_by_label("Request body (JSON)").input_value()

    page.set_viewport_size(PHONE)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    screenshot(page, "phone-requests")
    assert overflow <= 0
    assert_clean(page, allow=EXPECTED)


def test_a_streaming_job_shows_its_chunks_while_it_runs(page, console_dev, endpoints):
    open_tab(page, console_dev, endpoints["streaming"])
    status_reads: list[str] = []
    page.on("request", lambda r: "/status/" in r.url and status_reads.append(r.url))
    page.get_by_label("Request body (JSON)").fill(
        '{"input": {"prompt": "tell me", "max_tokens": 8, "delay_ms": 600}}'
    )
    page.get_by_role("button", name="Run async").click()
    # The endpoint's first job: no worker runs yet (workersMin 0), so one starts for it.
    page.get_by_role("status").filter(has_text="a cold start").wait_for()
    stream = page.get_by_label("Stream", exact=True)
    stream.wait_for(timeout=60_000)
    first_status, first_text = live_status(page), stream.inner_text()
    assert first_status in ("IN_QUEUE", "IN_PROGRESS"), first_status  # not ended yet
    wait_status(page, "COMPLETED")
    words = stream.inner_text().split()
    assert len(words) == 8 and len(words) > len(first_text.split())
    # The console never busy-polls: each status read is held by the gateway (?wait=).
    assert status_reads and all("?wait=" in url for url in status_reads), status_reads
    assert_clean(page, allow=EXPECTED)


def test_a_running_job_is_cancelled_from_the_list(page, console_dev, endpoints):
    ep = endpoints["streaming"]
    r = requests.post(
        f"{console_dev.url}/v2/{ep}/run",
        json={"input": {"prompt": "slow", "max_tokens": 300, "delay_ms": 1000}},
        headers=console_dev.headers(),
        timeout=10,
    )
    job_id = r.json()["id"]
    open_tab(page, console_dev, ep)
    row = page.locator(f'tr[data-job="{job_id}"]')
    for _ in range(60):  # until the worker holds it (IN_PROGRESS); the list is not live
        page.get_by_role("button", name="Refresh", exact=True).click()
        row.wait_for()
        if "IN_PROGRESS" in row.inner_text():
            break
        page.wait_for_timeout(1000)
    assert "IN_PROGRESS" in row.inner_text()
    row.get_by_role("button", name=f"Cancel {job_id}").click()
    page.locator(f'tr[data-job="{job_id}"] .badge', has_text="CANCELLED").wait_for()
    status = requests.get(
        f"{console_dev.url}/v2/{ep}/status/{job_id}", headers=console_dev.headers(), timeout=10
    ).json()
    assert status["status"] == "CANCELLED"
    assert_clean(page, allow=EXPECTED)


def test_the_list_pages_filters_and_purge_asks_first(page, console_dev, endpoints):
    ep = endpoints["parked"]  # workersMax 0: its jobs stay queued
    ids = []
    for n in range(23):
        r = requests.post(
            f"{console_dev.url}/v2/{ep}/run",
            json={"input": {"n": n}},
            headers=console_dev.headers(),
            timeout=10,
        )
        ids.append(r.json()["id"])
    open_tab(page, console_dev, ep)
    rows = page.locator("tbody tr[data-job]")
    shown: list[str] = []
    for expected in (10, 10, 3):
        page.get_by_text(f"Page {len(shown) // 10 + 1}").wait_for()
        assert rows.count() == expected
        shown += [rows.nth(i).get_attribute("data-job") for i in range(expected)]
        if expected == 10:
            page.get_by_role("button", name="Older").click()
    assert shown == ids[::-1]
    assert page.get_by_role("button", name="Older").is_disabled()
    page.get_by_role("button", name="Newer").click()
    page.get_by_text("Page 2").wait_for()
    assert rows.first.get_attribute("data-job") == ids[12]
    screenshot(page, "requests-list")

    page.get_by_label("Status", exact=True).select_option("COMPLETED")
    page.get_by_role("button", name="Apply filters").click()
    page.get_by_text("No requests match.").wait_for()
    page.get_by_label("Status", exact=True).select_option("IN_QUEUE")
    page.get_by_role("button", name="Apply filters").click()
    page.get_by_text("Page 1").wait_for()
    rows.first.wait_for()
    assert rows.first.get_attribute("data-job") == ids[-1] and rows.count() == 10
    page.get_by_label("Created from").fill("2099-01-01T00:00")
    page.get_by_role("button", name="Apply filters").click()
    page.get_by_text("No requests match.").wait_for()
    page.get_by_label("Created from").fill("")
    page.get_by_label("Created before").fill("2099-01-01T00:00")
    page.get_by_role("button", name="Apply filters").click()
    rows.first.wait_for()
    assert rows.count() == 10

    page.get_by_role("button", name="Purge queue").click()
    dialog = page.get_by_role("dialog", name="Purge the queue?")
    dialog.wait_for()
    dialog.get_by_role("button", name="Keep the queue").click()
    assert len(listed(console_dev, ep)) == 20  # nothing purged
    page.get_by_role("button", name="Purge queue").click()
    dialog.get_by_role("button", name="Purge queued jobs").click()
    page.get_by_text("No requests match.").wait_for()
    assert listed(console_dev, ep) == []
    assert_clean(page, allow=EXPECTED)


def test_a_failing_handler_shows_its_error_and_worker_log_lines(page, console_dev, endpoints):
    open_tab(page, console_dev, endpoints["raising"])
    page.get_by_role("button", name="Run async").click()
    wait_status(page, "FAILED")
    error = page.locator(".live-job .error").first
    assert "bad input" in error.inner_text()
    page.locator(".live-job .job-logs").wait_for()
    screenshot(page, "requests-failed")
    job_id = page.locator(".live-job .mono").first.inner_text()
    page.locator(f'tr[data-job="{job_id}"]').get_by_role("button", name=f"Retry {job_id}").click()
    page.get_by_text("Queued again").wait_for()
    assert_clean(page, allow=EXPECTED)
    # the worker's log lines of the failed job (GET /v1/endpoints/{id}/logs?job=)
    page.locator(".live-job .job-logs pre.log", has_text="ValueError").wait_for(timeout=15_000)


S3_CONFIG = {
    "accessId": "kept-apart",
    "accessSecret": "kept-apart-too",
    "bucketName": "out",
    "endpointUrl": "https://s3.example.com",
}


def test_a_listed_job_opens_with_its_input_and_output_and_the_retention_is_said(
    page, console_dev, endpoints
):
    job = requests.post(
        f"{console_dev.url}/v2/{endpoints['echo']}/run",
        json={"input": {"opened": "in the inspector"}, "s3Config": S3_CONFIG},
        headers=console_dev.headers(),
        timeout=30,
    ).json()
    status = f"{console_dev.url}/v2/{endpoints['echo']}/status/{job['id']}"
    wait_until(
        lambda: (
            requests.get(status, headers=console_dev.headers(), timeout=10).json()["status"]
            == "COMPLETED"
        ),
        "the job to complete",
    )
    # the input is for admin and `jobs` keys only; never the s3Config
    admin = requests.get(f"{status}?input=1", headers=console_dev.headers(), timeout=10).json()
    assert admin["input"] == {"opened": "in the inspector"}
    assert "kept-apart" not in str(admin)
    reader = {"authorization": f"Bearer {create_key(console_dev, 'reader', ['jobs:read'])}"}
    refused = requests.get(f"{status}?input=1", headers=reader, timeout=10)
    assert refused.status_code == 403 and "input" in refused.json()["error"]
    bad = requests.get(f"{status}?input=yes", headers=console_dev.headers(), timeout=10)
    assert bad.status_code == 400 and "'input'" in bad.json()["error"]
    plain = requests.get(status, headers=reader, timeout=10).json()
    assert plain["status"] == "COMPLETED" and "input" not in plain

    open_tab(page, console_dev, endpoints["echo"])
    assert "/runsync) job for 1 minute" in page.locator(".retention").inner_text()
    page.get_by_role("button", name=f"Open {job['id']}").click()
    detail = page.get_by_role("region", name=f"Job {job['id']}")
    detail.wait_for()
    assert (
        '"opened": "in the inspector"' in detail.get_by_label(f"Input of {job['id']}").inner_text()
    )
    assert '"echo"' in detail.get_by_label(f"Output of {job['id']}").inner_text()
    assert "kept-apart" not in detail.inner_text()
    screenshot(page, "requests-opened")
    page.get_by_role("button", name=f"Open {job['id']}").click()  # closes it again
    detail.wait_for(state="hidden")
    assert_clean(page, allow=EXPECTED)


def run_to_completion(dev, endpoint: str, body: dict) -> str:
    """Submit `body` with /run and wait for the job to complete; its id."""
    url = f"{dev.url}/v2/{endpoint}"
    job_id = requests.post(f"{url}/run", json=body, headers=dev.headers(), timeout=30).json()["id"]
    wait_until(
        lambda: (
            requests.get(f"{url}/status/{job_id}", headers=dev.headers(), timeout=10).json()[
                "status"
            ]
            == "COMPLETED"
        ),
        "the job to complete",
        timeout=120,
    )
    return job_id


def test_an_opened_streaming_job_shows_its_attempts_and_unread_chunks_until_read(
    page, console_dev, endpoints
):
    body = {"input": {"prompt": "inspect me", "max_tokens": 3}}
    job = {"id": run_to_completion(console_dev, endpoints["streaming"], body)}
    base = f"{console_dev.url}/v2/{endpoints['streaming']}"
    open_tab(page, console_dev, endpoints["streaming"])
    opener = page.get_by_role("button", name=f"Open {job['id']}")
    opener.click()
    detail = page.get_by_role("region", name=f"Job {job['id']}")
    chunks = detail.get_by_label(f"Stream chunks of {job['id']}")
    chunks.wait_for()
    assert chunks.inner_text().count('"output_tokens"') == 3  # one per token, none read yet
    facts = detail.locator("dl").inner_text()
    assert re.search(r"Attempts\s+1\b", facts), facts
    screenshot(page, "requests-opened-stream")
    # a /stream read takes the chunks: opened again, the inspector says they are gone
    read = requests.get(f"{base}/stream/{job['id']}", headers=console_dev.headers(), timeout=10)
    assert len(read.json()["stream"]) == 3
    opener.click()
    detail.wait_for(state="hidden")
    opener.click()
    page.get_by_role("region", name=f"Job {job['id']}").get_by_text(
        "a /stream read took them"
    ).wait_for()
    assert page.get_by_label(f"Stream chunks of {job['id']}").count() == 0
    assert_clean(page, allow=EXPECTED)


def test_an_opened_job_lists_each_attempt_with_its_worker_and_how_it_ended(
    page, console_dev, endpoints, tmp_path
):
    # The first worker's process exits while it holds the job (a lost worker): the job goes
    # back to the queue and a new worker (a new id) completes it.
    body = {"input": {"die_once": str(tmp_path / "died")}}
    job_id = run_to_completion(console_dev, endpoints["dies-once"], body)
    assert (tmp_path / "died").exists()
    open_tab(page, console_dev, endpoints["dies-once"])
    page.get_by_role("button", name=f"Open {job_id}").click()
    detail = page.get_by_role("region", name=f"Job {job_id}")
    attempts = detail.get_by_role("list", name=f"Attempts of {job_id}").get_by_role("listitem")
    attempts.first.wait_for()
    lost, completed = attempts.all_inner_texts()
    assert lost.endswith("worker lost: the job went back to the queue"), lost
    assert completed.endswith("completed"), completed
    workers = detail.locator("ol.attempts code").all_inner_texts()
    assert len(set(workers)) == 2 and all(w.startswith("dies-once-") for w in workers)
    facts = detail.locator("dl").inner_text()
    assert re.search(r"Attempts\s+2 \(its worker was lost 1 time", facts), facts
    screenshot(page, "requests-opened-attempts")
    page.set_viewport_size(PHONE)
    attempts.first.wait_for()
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    assert_clean(page, allow=EXPECTED)


def test_a_bad_json_error_clears_the_earlier_result(page, console_dev, endpoints):
    open_tab(page, console_dev, endpoints["echo"])
    page.get_by_role("button", name="Run", exact=True).click()
    wait_status(page, "COMPLETED")
    page.get_by_label("Request body (JSON)").fill("{nope")
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("alert").filter(has_text="not valid JSON").wait_for()
    assert page.locator(".live-job").count() == 0
    assert_clean(page, allow=EXPECTED)


def test_a_job_failed_by_on_worker_lost_says_so_in_its_attempts(
    page, console_dev, endpoints, tmp_path
):
    """An endpoint with `onWorkerLost: fail` (docs/lost-workers.md): its worker's process
    exits while it holds the job, which ends FAILED WORKER_LOST, and the inspector says the
    policy failed it (not 'out of attempts')."""
    create_endpoint(
        console_dev, "dies-fail", templateId="python tests/handlers/sleeper.py async",
        workersMax=1, onWorkerLost="fail",
    )  # fmt: skip
    url = f"{console_dev.url}/v2/dies-fail"
    body = {"input": {"die_once": str(tmp_path / "died")}}
    job_id = requests.post(f"{url}/run", json=body, headers=console_dev.headers()).json()["id"]

    def failed() -> dict | None:
        r = requests.get(f"{url}/status/{job_id}", headers=console_dev.headers(), timeout=10)
        return r.json() if r.json()["status"] == "FAILED" else None

    assert wait_until(failed, "the job to fail", timeout=120)["error"].startswith("WORKER_LOST")
    open_tab(page, console_dev, "dies-fail")
    page.get_by_role("button", name=f"Open {job_id}").click()
    detail = page.get_by_role("region", name=f"Job {job_id}")
    attempts = detail.get_by_role("list", name=f"Attempts of {job_id}").get_by_role("listitem")
    attempts.first.wait_for()
    [lost] = attempts.all_inner_texts()
    assert lost.endswith("worker lost: the job failed, not run again (the endpoint's onWorkerLost)")
    assert "WORKER_LOST: the worker running this job was lost" in detail.inner_text()
    screenshot(page, "requests-opened-worker-lost")
    assert_clean(page, allow=EXPECTED)
