"""The chart under a third-party scanner: checkov (pinned, `hack/checkov.sh`) on what
`helm template` renders from values.yaml and from every other values file the project
keeps (the chart's ci/, examples/values/, the real-node tests' values). Each finding is
fixed in the chart, or kept on purpose: then the object carries a `checkov.io/skipN:
CKV_…=reason` annotation and docs/security.md's table "Scanner findings kept" has a row for
it. Anything else fails (`make chart-scan`)."""

# ruff: noqa: F811 - the fixtures of tests/test_chart.py, imported, are test arguments here
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_chart import (  # noqa: F401
    CHART,
    RELEASE,
    REPO,
    SERVED,
    TOOLS_DIR,
    helm,
    required_tool,
)

CHECKOV = Path(TOOLS_DIR) / "checkov-venv" / "bin" / "checkov"  # hack/checkov.sh
SECURITY = REPO / "docs" / "security.md"
TABLE_HEADING = "### Scanner findings kept"

VALUES_FILES = [
    None,  # values.yaml alone
    *sorted((CHART / "ci").glob("*.yaml")),
    *sorted((REPO / "examples" / "values").glob("*.yaml")),
    REPO / "tests" / "node-values.yaml",
]

# Pinned images and a CPU limit everywhere: then the image and CPU findings pass outright
# (their skip annotations are written only while they would fail).
DIGEST = "sha256:" + "0" * 64
PINNED = {
    "image": {"digest": DIGEST},
    "redis": {"image": {"digest": DIGEST}, "resources": {"limits": {"cpu": "1"}}},
    "gateway": {"resources": {"limits": {"cpu": "2"}}},
    "operator": {
        "resources": {"limits": {"cpu": "1"}},
        "manage": {"resources": {"limits": {"cpu": "1"}}},
    },
}


def name_of(values: Path | None) -> str:
    return "values.yaml" if values is None else str(values.relative_to(REPO))


def find_checkov() -> str | None:
    """checkov from hack/checkov.sh (the version these tests are written against), else
    the first on PATH."""
    return str(CHECKOV) if os.access(CHECKOV, os.X_OK) else shutil.which("checkov")


@pytest.fixture(scope="session")
def checkov() -> str:
    """The checkov binary; without one the test skips, or fails under LOCKGATE_REQUIRE_CLUSTER=1."""
    missing = "checkov missing: `bash hack/checkov.sh` installs it (`make chart-scan` does)"
    return required_tool(find_checkov(), missing)


Report = dict[str, Any]


@pytest.fixture(scope="module")
def scan(helm: str, checkov: str, tmp_path_factory: pytest.TempPathFactory):
    """A function rendering the chart with a values file (or a dict of values) and running
    checkov on the objects, one rendering at a time (its graph checks, such as "a
    NetworkPolicy selects this pod", must not match objects of another rendering). It
    returns checkov's JSON report; each rendering is scanned once per module."""
    out = tmp_path_factory.mktemp("scan")
    reports: dict[str, Report] = {}

    def run(values: Path | dict[str, Any] | None) -> Report:
        key = json.dumps(values, sort_keys=True, default=str)
        if key in reports:
            return reports[key]
        path = out / f"values-{len(reports)}.yaml"
        if isinstance(values, dict):
            path.write_text(yaml.safe_dump(values))
        elif values is not None:
            path = values
        args = [helm, "template", *RELEASE, str(CHART)]
        for api_version in SERVED:  # the ServiceMonitor and ScaledObjects too
            args += ["--api-versions", api_version]
        args += ["--values", str(path)] if values is not None else []
        rendered = out / f"rendered-{len(reports)}.yaml"
        rendered.write_text(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        # --skip-download: no call to the vendor's platform (for its check metadata).
        command = [checkov, "-f", str(rendered), "--framework", "kubernetes", "--skip-download"]
        done = subprocess.run([*command, "--output", "json"], capture_output=True, text=True)
        assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: some check failed
        reports[key] = json.loads(done.stdout)
        return reports[key]

    return run


def findings(report: Report, kind: str) -> list[dict[str, Any]]:
    return report["results"][f"{kind}_checks"]


def described(checks: list[dict[str, Any]]) -> str:
    return "\n".join(f"  {c['check_id']} {c['resource']}: {c['check_name']}" for c in checks)


def kept_in_docs() -> dict[str, str]:
    """docs/security.md's table of kept findings: check id -> its `objects` cell."""
    section = SECURITY.read_text().split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3:
            rows |= dict.fromkeys(re.findall(r"`(CKV2?_K8S_\d+)`", cells[0]), cells[1])
    return rows


def documents(objects: str, resource: str) -> bool:
    """A row's objects cell names a checkov resource (`Kind.namespace.name`): its kind and
    `<release>-<component>`."""
    kind, _, name = resource.split(".", 2)
    component = name.removeprefix(f"{RELEASE[0]}-")
    return kind in objects and f"`<release>-{component}`" in objects


def object_of(resource: str) -> str:
    kind, _, name = resource.split(".", 2)
    return f"{kind} <release>-{name.removeprefix(f'{RELEASE[0]}-')}"


@pytest.mark.parametrize("values", VALUES_FILES, ids=name_of)
def test_checkov_finds_nothing_left_unexplained(scan: Callable, values: Path | None) -> None:
    report = scan(values)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] > 0
    failed = findings(report, "failed")
    assert not failed, (
        f"checkov findings on {name_of(values)}: fix them in the chart, or keep them with a "
        f"checkov.io/skipN annotation and a row in docs/security.md:\n{described(failed)}"
    )


@pytest.mark.parametrize("values", VALUES_FILES, ids=name_of)
def test_every_kept_finding_has_a_reason_and_a_row_in_the_docs(
    scan: Callable, values: Path | None
) -> None:
    rows = kept_in_docs()
    for check in findings(scan(values), "skipped"):
        what = f"{check['check_id']} on {object_of(check['resource'])}"
        assert check["check_result"].get("suppress_comment") not in (
            None,
            "",
            "No comment provided",
        ), what
        assert check["check_id"] in rows, f"{what}: no row in {TABLE_HEADING!r}"
        assert documents(rows[check["check_id"]], check["resource"]), f"{what}: not in its row"


def test_every_row_of_the_docs_is_a_finding_still_kept(scan: Callable) -> None:
    kept = {
        (c["check_id"], object_of(c["resource"]))
        for v in VALUES_FILES
        for c in findings(scan(v), "skipped")
    }
    for check, objects in kept_in_docs().items():
        named = re.findall(r"`<release>-([a-z-]+)`", objects)
        assert named, check
        for component in named:
            assert any(c == check and o.endswith(f"<release>-{component}") for c, o in kept), (
                f"{check} is no longer kept on <release>-{component}: remove it from the docs"
            )


def test_pinned_images_and_cpu_limits_pass_without_being_kept(scan: Callable) -> None:
    report = scan(PINNED)
    assert not findings(report, "failed"), described(findings(report, "failed"))
    skipped = {c["check_id"] for c in findings(report, "skipped")}
    assert not {"CKV_K8S_11", "CKV_K8S_15", "CKV_K8S_43"} & skipped
