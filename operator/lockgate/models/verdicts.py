"""How a `tests.json` test went, and what a TEST_FAILED build says of it (pure; shared by
`lockgate dev --test`, dev mode's canary and the operator's: docs/builds.md, "Tested
before it takes traffic")."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

from lockgate.models.build import FailedTest
from lockgate.models.hub import HubTest
from lockgate.models.jobs import JobStatus

DETAIL_CHARS = 300  # of a failed job's error or an HTTP error's body, on the test's line
JOB_API = "the job API"  # what a queue endpoint's test runs through
LB_ROUTE = "the load-balancing route"  # … and a load-balancing endpoint's


@dataclass(frozen=True, slots=True)
class CaseResult:
    """How one test went: its job's final status (or why there is none) and the time."""

    name: str
    passed: bool
    status: str  # the job's status, TIMED_OUT, or HTTP <code> as `via` answered
    detail: str  # why it failed: the job's error, the answer's body; "" when it passed
    seconds: float
    out_of_time: bool = False  # the test's own timeout passed (its job or request cancelled)
    via: str = JOB_API  # what the test ran through (JOB_API, LB_ROUTE)


def failure_detail(body: dict[str, Any]) -> str:
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


def http_result(test: HubTest, status: int, body: bytes, seconds: float) -> CaseResult:
    """A load-balancing endpoint's test as the route answered it: passed on HTTP 200
    (RunPod's rule, said of any endpoint; no other 2xx), else failed with the start of
    the answer's body."""
    passed = status == 200
    detail = "" if passed else clipped(body.decode("utf-8", "replace"))
    return CaseResult(test.name, passed, f"HTTP {status}", detail, seconds, via=LB_ROUTE)


def unanswered(test: HubTest, seconds: float, why: str = "", via: str = LB_ROUTE) -> CaseResult:
    """A test with no answer: out of its time (`why` empty: its request was cancelled),
    or the connection failed (`why`)."""
    if why:
        return CaseResult(test.name, False, "NO_ANSWER", clipped(why), seconds, via=via)
    late = f"no answer within {test.timeout_s:g} s; cancelled"
    return CaseResult(test.name, False, "TIMED_OUT", late, seconds, True, via=via)


def result_line(r: CaseResult) -> str:
    """One readable line per test: `test 'x' passed (COMPLETED, 1.2 s)`."""
    verdict = "passed" if r.passed else "FAILED"
    why = f": {r.detail}" if r.detail else ""
    return f"test {r.name!r} {verdict} ({r.status}, {r.seconds:.1f} s){why}"


def failed_test(test: HubTest, result: CaseResult) -> FailedTest | None:
    """Why `test` failed, as a TEST_FAILED build names it (None: it passed): `job FAILED:
    ValueError: …`, `timed out after 30 s`, `the job API answered HTTP 400: …`, `the
    load-balancing route answered HTTP 500: …`, `the load-balancing route did not answer:
    …`."""
    if result.passed:
        return None
    if result.out_of_time:
        return FailedTest(name=test.name, reason=f"timed out after {test.timeout_s:g} s")
    if result.status.startswith("HTTP "):
        reason = f"{result.via} answered {result.status}"
    elif result.status == "NO_ANSWER":
        reason = f"{result.via} did not answer"
    else:
        reason = f"job {result.status}"
    if result.detail:
        reason = f"{reason}: {result.detail}"
    return FailedTest(name=test.name, reason=reason)


def failed_test_error(failed: FailedTest) -> str:
    """A TEST_FAILED build's `error`: `test 'basic' failed: job FAILED: …`."""
    return f"test {failed.name!r} failed: {failed.reason}"
