"""`lockgate dev --test`: a repository's `tests.json` run against the dev endpoint through
the job API, one test after another.

Each test's `input` is submitted with `POST /v2/{endpoint}/run`; its status is then read
with `GET …/status/{id}?wait=…` (held until the job is final) until the test's `timeout`
has passed. A test passes when its job is COMPLETED (RunPod: "the endpoint returns a 200
response"); a test out of time is cancelled and fails."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from lockgate.models.build import FailedTest
from lockgate.models.hub import HubTest
from lockgate.models.jobs import FINAL_STATES, JobStatus

WAIT_STEP_MS = 300_000  # the longest hold `GET /status?wait=` grants; a longer test asks again
DETAIL_CHARS = 300  # of a failed job's error or an HTTP error's body, on the test's line


@dataclass(frozen=True, slots=True)
class CaseResult:
    """How one test went: its job's final status (or why there is none) and the time."""

    name: str
    passed: bool
    status: str  # the job's status, TIMED_OUT, or HTTP <code> when the job API refused it
    detail: str  # why it failed: the job's error, the refusal's body; "" when it passed
    seconds: float
    out_of_time: bool = False  # the test's own timeout passed (its job was cancelled)


async def run_tests(
    session: aiohttp.ClientSession,
    job_api: str,
    headers: dict[str, str],
    tests: Sequence[HubTest],
    report: Callable[[CaseResult], None] = lambda _: None,
) -> list[CaseResult]:
    """Run `tests` in order against `job_api` (`…/v2/{endpoint}`), calling `report` after
    each; every result."""
    results = []
    for test in tests:
        result = await run_test(session, job_api, headers, test)
        report(result)
        results.append(result)
    return results


async def run_test(
    session: aiohttp.ClientSession, job_api: str, headers: dict[str, str], test: HubTest
) -> CaseResult:
    """One test: its input as a job, waited for within its timeout."""
    started = time.monotonic()
    deadline = started + test.timeout_s

    def result(status: str, detail: str = "", out_of_time: bool = False) -> CaseResult:
        passed = status == JobStatus.COMPLETED
        took = time.monotonic() - started
        return CaseResult(test.name, passed, status, detail, took, out_of_time)

    async with session.post(f"{job_api}/run", json={"input": test.input}, headers=headers) as r:
        if r.status != 200:
            return result(f"HTTP {r.status}", clipped(await r.text()))
        job_id = (await r.json())["id"]
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            await session.post(f"{job_api}/cancel/{job_id}", headers=headers)
            why = f"not final within {test.timeout_s:g} s; cancelled"
            return result("TIMED_OUT", why, out_of_time=True)
        wait = max(1, min(left_ms, WAIT_STEP_MS))
        url = f"{job_api}/status/{job_id}?wait={wait}"
        async with session.get(url, headers=headers) as r:
            if r.status != 200:
                return result(f"HTTP {r.status}", clipped(await r.text()))
            body = await r.json()
        if body.get("status") in FINAL_STATES:
            return result(body["status"], failure_detail(body))


def failure_detail(body: dict) -> str:
    """What a final job's status body says went wrong ("" for a completed job). The runpod
    SDK's error (a JSON text with the exception's type, message and traceback) is shown as
    `ValueError: message`."""
    if body.get("status") == JobStatus.COMPLETED:
        return ""
    error = body.get("error") or body.get("output") or ""
    if isinstance(error, str):
        with contextlib.suppress(ValueError):
            error = json.loads(error)
    if isinstance(error, dict) and "error_message" in error:
        kind = re.sub(r"^<class '(?:builtins\.)?(.*)'>$", r"\1", str(error.get("error_type", "")))
        return clipped(f"{kind}: {error['error_message']}" if kind else str(error["error_message"]))
    return clipped(error if isinstance(error, str) else json.dumps(error))


def clipped(text: str) -> str:
    """`text` on one line, at most DETAIL_CHARS long."""
    line = " ".join(text.split())
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def result_line(r: CaseResult) -> str:
    """One readable line per test: `test 'x' passed (COMPLETED, 1.2 s)`."""
    verdict = "passed" if r.passed else "FAILED"
    why = f": {r.detail}" if r.detail else ""
    return f"test {r.name!r} {verdict} ({r.status}, {r.seconds:.1f} s){why}"


def summary_line(results: Sequence[CaseResult]) -> str:
    """`tests: 2 passed, 1 failed (of 3)`, naming the failed ones."""
    failed = [r.name for r in results if not r.passed]
    line = f"tests: {len(results) - len(failed)} passed, {len(failed)} failed (of {len(results)})"
    return line + (f": {', '.join(map(repr, failed))}" if failed else "")


def failed_test(test: HubTest, result: CaseResult) -> FailedTest | None:
    """Why `test` failed, as a TEST_FAILED build names it (None: it passed): `job FAILED:
    ValueError: …`, `timed out after 30 s`, `the job API answered HTTP 400: …`."""
    if result.passed:
        return None
    if result.out_of_time:
        return FailedTest(name=test.name, reason=f"timed out after {test.timeout_s:g} s")
    if result.status.startswith("HTTP "):
        reason = f"the job API answered {result.status}"
    else:
        reason = f"job {result.status}"
    if result.detail:
        reason = f"{reason}: {result.detail}"
    return FailedTest(name=test.name, reason=reason)


def failed_test_error(failed: FailedTest) -> str:
    """A TEST_FAILED build's `error`: `test 'basic' failed: job FAILED: …`."""
    return f"test {failed.name!r} failed: {failed.reason}"
