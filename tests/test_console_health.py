"""The console's Overview and Metrics pages in Chromium against a real `lockgate dev`: worker
states from /health and the cause of a crash loop on the Overview; charts of the history
after some jobs on the Metrics page; both readable at phone width."""

from __future__ import annotations

import re
import time

import requests

from console_browser import PHONE, assert_clean, screenshot, sign_in

pytest_plugins = ["console_fixtures"]

CRASHING = "python -c \"print('boom: CUDA driver not found'); raise SystemExit(1)\""


def call(dev, method: str, path: str, body=None):
    headers = {"authorization": f"Bearer {dev.key}"}
    resp = requests.request(method, dev.url + path, json=body, headers=headers, timeout=30)
    assert resp.status_code < 300, resp.text
    return resp.json() if resp.content else None


def poll(check, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def no_horizontal_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


def open_page(page, dev, hash_: str) -> None:
    sign_in(page, dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{dev.url}/console/#/{hash_}")


def test_overview_shows_worker_states_queue_and_settings(page, console_dev):
    for n in range(3):
        job = call(console_dev, "POST", f"/v2/{console_dev.endpoint}/runsync", {"input": {"n": n}})
        assert job["status"] == "COMPLETED"
    open_page(page, console_dev, f"endpoints/{console_dev.endpoint}")
    workers = page.get_by_role("region", name="Workers")
    workers.wait_for()
    for state in ("running", "idle", "initializing", "throttled", "unhealthy"):
        assert workers.get_by_text(state, exact=True).is_visible()
    jobs = page.get_by_role("region", name="Jobs")
    jobs.get_by_text("completed").wait_for()
    assert "3" in jobs.inner_text()
    assert page.get_by_role("button", name=re.compile("Copy URL")).is_visible()
    assert f"/v2/{console_dev.endpoint}" in page.get_by_role("region", name="Endpoint").inner_text()
    assert page.get_by_role("region", name="Problems").count() == 0
    assert "Ready" in page.get_by_role("region", name="Conditions").inner_text()
    screenshot(page, "overview-healthy")
    page.set_viewport_size(PHONE)
    workers.wait_for()
    no_horizontal_scroll(page)
    screenshot(page, "overview-healthy-phone")
    assert_clean(page)


def test_a_crash_looping_endpoint_shows_unhealthy_and_the_cause(page, console_dev):
    call(console_dev, "POST", "/v1/endpoints",
         {"id": "crashy", "name": "crashy", "templateId": CRASHING, "workersMin": 1})  # fmt: skip
    health = poll(
        lambda: (h := call(console_dev, "GET", "/v2/crashy/health"))["workers"]["unhealthy"] and h,
        "unhealthy workers in /health",
    )
    assert health["workers"]["unhealthy"] >= 1
    open_page(page, console_dev, "endpoints/crashy")
    problem = page.get_by_role("region", name="Problems").get_by_role("alert")
    problem.wait_for()
    text = problem.inner_text()
    assert "CrashLoop" in text and "exit code 1" in text and "boom: CUDA driver not found" in text
    unhealthy = page.get_by_role("region", name="Workers").locator(".stat.bad")
    assert "unhealthy" in unhealthy.inner_text()
    screenshot(page, "overview-unhealthy")
    # The Metrics page's workers chart has them too, once a point was sampled.
    poll(
        lambda: any(p["workersUnhealthy"] for p in metrics(console_dev, "crashy")),
        "unhealthy workers in the history",
    )
    page.goto(f"{console_dev.url}/console/#/endpoints/crashy/metrics")
    workers = page.get_by_role("list", name="Workers legend")
    workers.wait_for()
    assert re.search(r"unhealthy\s*now [1-9]", workers.inner_text()), workers.inner_text()
    assert re.search(r"throttled\s*now 0", workers.inner_text()), workers.inner_text()
    assert_clean(page)
    call(console_dev, "DELETE", "/v1/endpoints/crashy")


def metrics(dev, endpoint: str) -> list[dict]:
    return call(dev, "GET", f"/v1/endpoints/{endpoint}/metrics")["points"]


def test_jobs_by_state_charts_completed_failed_timed_out_and_cancelled(page, console_dev):
    call(console_dev, "POST", "/v1/endpoints", {"id": "states", "name": "states",
         "templateId": "python tests/handlers/sleeper.py async", "workersMin": 1})  # fmt: skip
    base = "/v2/states"
    assert call(console_dev, "POST", f"{base}/runsync", {"input": {}})["status"] == "COMPLETED"
    failed = call(console_dev, "POST", f"{base}/runsync", {"input": {"fail": "bad input"}})
    assert failed["status"] == "FAILED", failed
    slow = {"input": {"sleep": 60}, "policy": {"executionTimeout": 5000}}
    timing_out = call(console_dev, "POST", f"{base}/run", slow)["id"]
    queued = call(console_dev, "POST", f"{base}/run", {"input": {"sleep": 60}})["id"]
    assert call(console_dev, "POST", f"{base}/cancel/{queued}")["status"] == "CANCELLED"
    poll(
        lambda: call(console_dev, "GET", f"{base}/status/{timing_out}")["status"] == "TIMED_OUT",
        "the job past its executionTimeout timed out",
    )
    kinds = ("completed", "failed", "timedOut", "cancelled")
    poll(
        lambda: all(sum(p[k] for p in metrics(console_dev, "states")) for k in kinds),
        "every final state in the history",
    )
    open_page(page, console_dev, "endpoints/states/metrics?range=15m")
    chart = page.get_by_role("region", name="Jobs by state")
    legend = chart.get_by_role("list", name="Jobs by state legend")
    legend.wait_for()
    said = legend.inner_text()
    for label in ("completed", "failed", "timed out", "cancelled"):
        assert re.search(f"{label}\\s*total 1\\b", said), said
    for label in ("in queue", "in progress"):
        assert re.search(f"{label}\\s*now \\d", said), said
    assert chart.locator("path.series").count() == 6
    assert chart.locator("path.series.level").count() == 2  # the gauges, dashed
    assert "by final state; dashed: jobs in queue and in progress as it ends" in chart.inner_text()
    img = chart.get_by_role("img").get_attribute("aria-label")
    assert img.startswith("Jobs by state, last 15 min; total: completed 1, failed 1"), img
    chart.scroll_into_view_if_needed()
    screenshot(page, "metrics-jobs-by-state")
    assert_clean(page)
    call(console_dev, "DELETE", "/v1/endpoints/states")


def delay_gap(points: list[dict]) -> bool:
    """Whether the queue delay has values on both sides of an interval without one."""
    seen = [p["delayP50"] is not None for p in points]
    first = seen.index(True) if True in seen else len(seen)
    return any(seen[first:]) and not all(seen[first : len(seen) - seen[::-1].index(True)])


def test_metrics_page_charts_the_history_after_some_jobs(page, console_dev):
    path = f"/v1/endpoints/{console_dev.endpoint}/metrics"
    for n in range(4):
        call(console_dev, "POST", f"/v2/{console_dev.endpoint}/runsync", {"input": {"n": n}})
    time.sleep(21)  # two 10 s intervals with no job taken: a gap in the queue delay
    call(console_dev, "POST", f"/v2/{console_dev.endpoint}/runsync", {"input": {"n": 4}})
    poll(
        lambda: delay_gap(call(console_dev, "GET", path)["points"]),
        "the jobs in the history, with a gap in the queue delay",
    )
    open_page(page, console_dev, f"endpoints/{console_dev.endpoint}/metrics")
    charts = ("Queue", "Workers", "Cold starts per 10 s", "Cold-start time", "Jobs by state")
    for name in (*charts, "Execution time", "Queue delay"):
        page.get_by_role("img", name=re.compile(f"^{name}, last 1 h;")).wait_for()
    ranges = page.get_by_role("group", name="Range")
    assert ranges.get_by_role("button", name="1 h").get_attribute("aria-pressed") == "true"
    assert ranges.get_by_role("button").all_inner_texts() == ["15 min", "1 h", "6 h", "24 h"]
    outcomes = page.get_by_role("list", name="Jobs by state legend")
    assert "completed" in outcomes.inner_text() and "failed" in outcomes.inner_text()
    completed = re.search(r"completed\s*total (\d+)", outcomes.inner_text())
    assert completed and int(completed[1]) >= 5  # summed over the range, not the newest point
    assert "Each point: jobs that ended during a 10 s interval, by final" in page.inner_text("main")
    # The endpoint's worker started within the hour: its first heartbeat is a cold start.
    starts = page.get_by_role("list", name="Cold starts per 10 s legend").inner_text()
    assert re.search(r"cold starts\s*total [1-9]", starts), starts
    assert "workers new to the endpoint (their first heartbeat)" in page.inner_text("main")
    # ... timed from the dev pool's spawning its process to its first call.
    boot = page.get_by_role("list", name="Cold-start time legend").inner_text()
    assert re.search(r"p50\s*max \d", boot) and re.search(r"p95\s*max \d", boot), boot
    # Regular time axes: every tick on a round minute.
    ticks = [int(t) for t in page.locator("svg text.time").evaluate_all(
        "els => els.map((e) => e.dataset.t)")]  # fmt: skip
    assert len(ticks) >= 4 and all(t % 60 == 0 for t in ticks), ticks
    # The queue-delay p50 line joins its points across the intervals without a job taken.
    delay = page.get_by_role("region", name="Queue delay")
    p50 = delay.locator("path.series.s0").get_attribute("d")
    assert p50.count("M") == 1 and p50.count("L") >= 1, p50
    assert delay.locator("circle.dot").count() == 0
    execution = page.get_by_role("list", name="Execution time legend")
    assert re.search(r"p50\s*max \d", execution.inner_text()), execution.inner_text()
    screenshot(page, "metrics")
    ranges.get_by_role("button", name="15 min").click()
    page.get_by_role("img", name=re.compile("^Queue delay, last 15 min;")).wait_for()
    assert page.url.endswith("/metrics?range=15m")
    page.reload()
    page.get_by_role("img", name=re.compile("^Queue, last 15 min;")).wait_for()
    assert ranges.get_by_role("button", name="15 min").get_attribute("aria-pressed") == "true"
    screenshot(page, "metrics-15m")  # docs/images/console-metrics.png
    # 24 h: minute points (the first is written once a minute of history has ended).
    poll(lambda: call(console_dev, "GET", path + "?interval=60")["points"], "a minute point", 90)
    ranges.get_by_role("button", name="24 h").click()
    page.get_by_role("img", name=re.compile("^Jobs by state, last 24 h;")).wait_for()
    assert page.url.endswith("/metrics?range=24h")
    assert "Each point: jobs that ended during a minute, by final" in page.inner_text("main")
    ticks = [int(t) for t in page.locator("svg text.time").evaluate_all(
        "els => els.map((e) => e.dataset.t)")]  # fmt: skip
    assert len(ticks) >= 3 and all(t % 3600 == 0 for t in ticks), ticks
    screenshot(page, "metrics-24h")
    page.set_viewport_size(PHONE)
    page.reload()
    page.get_by_role("img", name=re.compile("^Queue delay,")).wait_for()
    no_horizontal_scroll(page)
    screenshot(page, "metrics-phone")
    assert_clean(page)
