"""The CLI's endpoint states (`commands.state`) are the console's (`state.js`'s
`endpointState`): both run on the same records, with Node.js (which `make mcp` needs too),
and must agree on every label and reason."""

from __future__ import annotations

from typing import Any

from lockgate.commands.state import endpoint_state
from tests.conftest import REPO
from tests.console_js import run_js

STATE_JS = REPO / "operator/lockgate/manage/static/pages/state.js"


def cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


LOOP = cond("CrashLoop", "True", "WorkersCrashAtStart", "workers crash at start (exit code 1)")
PULL = cond("WorkersHealthy", "False", "ImagePullError", "pull access denied")
ODD = cond("WorkersHealthy", "False", "SomethingNew", "")
DOWNLOADING = cond("ModelsCached", "False", "Downloading", "2 of 3 models")
POD_DOWNLOAD = cond("WorkersHealthy", "True", "DownloadingModels", "fetching gpt2")
CASES: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = [
    (None, None),
    ({"phase": "Ready"}, None),
    ({"phase": "Ready", "conditions": [LOOP]}, None),
    ({"phase": "CrashLoop"}, None),
    ({"phase": "Failed", "conditions": [LOOP]}, None),
    ({"phase": "Ready", "conditions": [PULL]}, None),
    ({"phase": "Degraded", "conditions": [ODD]}, None),
    ({"phase": "Ready"}, {"workers": {"unhealthy": 1}}),
    ({"phase": "Ready"}, {"workers": {"unhealthy": 3, "idle": 1}}),
    ({"phase": "Initializing", "conditions": [DOWNLOADING]}, {"workers": {"idle": 0}}),
    ({"phase": "Initializing", "conditions": [POD_DOWNLOAD]}, None),
    ({"phase": "Ready", "conditions": [DOWNLOADING]}, {"workers": {"running": 1}}),
    ({"phase": "Ready", "conditions": [cond("CrashLoop", "False"), PULL]}, None),
    ({"phase": "Pending", "conditions": []}, {"workers": {}}),
]


def console_states(cases: list[tuple[Any, Any]]) -> list[list[str]]:
    return run_js(
        STATE_JS, "{endpointState}",
        "([status, health]) => { const s = endpointState(status === null ? null : {status},"
        " health); return [s.label, s.why || '']; }",
        cases,
    )  # fmt: skip


def test_the_cli_and_the_console_name_every_state_alike() -> None:
    console = console_states(CASES)
    cli = [list(endpoint_state(status, health)) for status, health in CASES]
    assert cli == console
    assert {label for label, _ in cli} >= {"Crash loop", "Image pull error", "Unhealthy",
                                           "Downloading models", "Ready", "Failed"}  # fmt: skip
