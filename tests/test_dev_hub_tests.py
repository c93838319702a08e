"""`lockgate dev --test`'s lines: one per test and a summary, a failed job's error shown as
the exception the handler raised; its exit code (pure functions)."""

from __future__ import annotations

import json

import pytest

from lockgate.apps.dev import exit_code
from lockgate.dev.hub_tests import CaseResult, failure_detail, result_line, summary_line

RUNPOD_ERROR = json.dumps({
    "error_type": "<class 'ValueError'>",
    "error_message": "asked to fail",
    "error_traceback": "Traceback (most recent call last):\n  ...",
})  # fmt: skip


def test_a_failed_jobs_runpod_error_is_shown_as_its_exception():
    assert (
        failure_detail({"status": "FAILED", "error": RUNPOD_ERROR}) == "ValueError: asked to fail"
    )
    assert failure_detail({"status": "FAILED", "error": "out of\nmemory"}) == "out of memory"
    assert failure_detail({"status": "COMPLETED", "output": {"error": "x"}}) == ""


def test_a_long_error_is_cut_to_one_short_line():
    detail = failure_detail({"status": "FAILED", "error": "x" * 1000})
    assert len(detail) == 300 and detail.endswith("…")


def test_each_test_is_one_line_and_the_summary_names_the_failed_ones():
    ok = CaseResult("echo", True, "COMPLETED", "", 1.25)
    bad = CaseResult("fails", False, "FAILED", "ValueError: asked to fail", 0.5)
    assert result_line(ok) == "test 'echo' passed (COMPLETED, 1.2 s)"
    assert result_line(bad) == "test 'fails' FAILED (FAILED, 0.5 s): ValueError: asked to fail"
    assert summary_line([ok, bad]) == "tests: 1 passed, 1 failed (of 2): 'fails'"
    assert summary_line([ok]) == "tests: 1 passed, 0 failed (of 1)"


@pytest.mark.parametrize(
    ("stopped", "tested", "passed", "code"),
    [
        (0, False, None, 0),  # no --test: the stop's code
        (130, False, None, 130),
        (0, True, True, 0),  # every test passed
        (0, True, False, 1),  # a test failed
        (0, True, None, 130),  # Ctrl-C before the tests ended
        (130, True, True, 130),  # a second Ctrl-C stopped it at once
    ],
)
def test_the_exit_code_says_whether_the_tests_passed(stopped, tested, passed, code):
    assert exit_code(stopped, tested, passed) == code
