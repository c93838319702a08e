"""`lockgate dev --test`: a repository's `tests.json` run against the dev endpoint through
the job API, one test after another.

Each test's `input` is submitted with `POST /v2/{endpoint}/run`; its status is then read
with `GET …/status/{id}?wait=…` (held until the job is final) until the test's `timeout`
has passed. A test passes when its job is COMPLETED (RunPod: "the endpoint returns a 200
response"); a test out of time is cancelled and fails."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from lockgate.models.hub import HubTest
from lockgate.models.jobs import FINAL_STATES, JobStatus
from lockgate.models.verdicts import (
    CaseResult,
    clipped,
    failed_test,
    failed_test_error,
    failure_detail,
    result_line,
)

# One test against a URL with these headers: `run_test` (a job) or `run_lb_test` (a request).
RunOne = Callable[[aiohttp.ClientSession, str, dict[str, str], HubTest], Awaitable[CaseResult]]
WAIT_STEP_MS = 300_000  # the longest hold `GET /status?wait=` grants; a longer test asks again

__all__ = [
    "CaseResult", "clipped", "failed_test", "failed_test_error", "failure_detail",
    "result_line", "run_test", "run_tests", "summary_line",
]  # fmt: skip


async def run_tests(
    session: aiohttp.ClientSession,
    job_api: str,
    headers: dict[str, str],
    tests: Sequence[HubTest],
    report: Callable[[CaseResult], None] = lambda _: None,
    run: RunOne | None = None,
) -> list[CaseResult]:
    """Run `tests` in order against `job_api` (`…/v2/{endpoint}`; with `run`
    `gateway.lb_tests.run_lb_test`, a load-balancing endpoint's `…/lb/{endpoint}`),
    calling `report` after each; every result."""
    results = []
    for test in tests:
        result = await (run or run_test)(session, job_api, headers, test)
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


def summary_line(results: Sequence[CaseResult]) -> str:
    """`tests: 2 passed, 1 failed (of 3)`, naming the failed ones."""
    failed = [r.name for r in results if not r.passed]
    line = f"tests: {len(results) - len(failed)} passed, {len(failed)} failed (of {len(results)})"
    return line + (f": {', '.join(map(repr, failed))}" if failed else "")
