"""The console's Logs page (issue 50, item 10) against a real `lockgate dev`: the runpod SDK's
JSON lines read as level and message, search by text and level, and a download of a time
range's lines as a file (the file's lines checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from console_browser import assert_clean, screenshot, sign_in

pytest_plugins = ["console_fixtures"]

ENDPOINT = "console-levels"


@pytest.fixture(scope="module")
def levels(console_dev) -> str:
    """An endpoint whose runpod-SDK handler logs at each level (tests/workers/runpod_levels.py)."""
    body = {
        "id": ENDPOINT, "templateId": "python tests/workers/runpod_levels.py",
        "workersMin": 1, "workersMax": 1,
    }  # fmt: skip
    resp = requests.post(
        f"{console_dev.url}/v1/endpoints", json=body, headers=console_dev.headers(), timeout=10
    )
    assert resp.status_code == 200, resp.text
    return ENDPOINT


def run(dev, word: str) -> dict:
    resp = requests.post(
        f"{dev.url}/v2/{ENDPOINT}/runsync?wait=60000",
        json={"input": {"say": word}}, headers=dev.headers(), timeout=70,
    )  # fmt: skip
    assert resp.status_code == 200 and resp.json()["status"] == "COMPLETED", resp.text
    return resp.json()


def api_lines(dev, **params) -> list[dict]:
    resp = requests.get(
        f"{dev.url}/v1/endpoints/{ENDPOINT}/logs", params=params, headers=dev.headers(), timeout=10
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["lines"]


def test_logs_read_as_levels_searched_and_downloaded(page, console_dev, levels) -> None:
    run(console_dev, "alpha")
    [printed] = [x for x in api_lines(console_dev, q="print says alpha")]
    beta = run(console_dev, "beta")
    sign_in(page, console_dev)
    page.wait_for_url(re.compile(r"#/endpoints$"))
    page.goto(f"{console_dev.url}/console/#/endpoints/{levels}/logs")
    log = page.get_by_role("log", name="Worker log lines")
    error_line = log.locator(".log-line", has_text="error says beta")
    error_line.wait_for()
    # the runpod SDK's JSON line reads as its level and message, not raw JSON
    expect(error_line.locator(".level")).to_have_text("ERROR")
    expect(error_line.locator(".text")).to_have_text("ERRORerror says beta")
    raw = [t for t in log.locator(".log-line .text").all_inner_texts() if t.startswith("{")]
    assert not raw, raw

    # search by text (any case), then by level
    page.get_by_label("Search", exact=True).fill("SAYS ALPHA")
    texts = log.locator(".log-line .text").all_inner_texts()
    assert texts and all("says alpha" in t for t in texts), texts
    page.get_by_label("Level", exact=True).select_option("WARN")
    expect(log.locator(".log-line")).to_have_count(2)  # warn and error of alpha
    assert sorted(log.locator(".log-line .text").all_inner_texts()) == [
        "ERRORerror says alpha", "WARNwarn says alpha",
    ]  # fmt: skip
    screenshot(page, "logs-search")
    page.get_by_label("Level", exact=True).select_option("")
    page.get_by_label("Search", exact=True).fill("")

    # download: from just after alpha's last line to now, only beta's lines are in the file
    local = """(ts) => { const d = new Date(ts);
      return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 23); }"""
    start = page.evaluate(local, printed["ts"])
    page.get_by_label("From", exact=True).fill(start)
    with page.expect_download() as done:
        page.get_by_role("button", name="Download").click()
    download = done.value
    assert download.suggested_filename.startswith(f"{ENDPOINT}-logs-")
    assert download.suggested_filename.endswith(".log")
    lines = Path(download.path()).read_text().splitlines()
    assert lines, "an empty file"
    assert any(beta["id"] in x and "error says beta" in x for x in lines), lines
    assert not any("says alpha" in x for x in lines), lines  # (the SDK logs more of alpha after)
    ts, worker, stream, _job, _rest = lines[0].split(" ", 4)
    assert ts.endswith("Z") and worker.startswith(f"{ENDPOINT}-") and stream in ("stdout", "stderr")
    # the file's lines are the API's for the range (the SDK's debug lines go on after it)
    fetched = api_lines(console_dev, since=printed["ts"])[: len(lines)]
    assert lines == [
        " ".join([x["ts"], x["worker"], x["stream"], x["job"] or "-", x["line"]]) for x in fetched
    ]
    # the filters apply to the file too
    page.get_by_label("Search", exact=True).fill("print says")
    with page.expect_download() as done:
        page.get_by_role("button", name="Download").click()
    only = Path(done.value.path()).read_text().splitlines()
    assert len(only) == 1 and only[0].endswith(" print says beta"), only
    page.get_by_text("1 line saved").wait_for()
    screenshot(page, "logs-download")
    assert_clean(page)
