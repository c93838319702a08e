"""The GitOps examples (examples/gitops/): the Argo CD health check of an Endpoint, run for
real in Lua 5.1 (the dialect of Argo CD's gopher-lua) through `lupa`, against statuses the
operator's own status builder writes; and the Application, which must never prune or
cascade-delete the CRDs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lockgate.kube import status as st
from lockgate.models.crashloop import CrashLoop
from tests.test_chart import CHART, find_helm

lua51 = pytest.importorskip("lupa.lua51")

GITOPS = Path(__file__).resolve().parent.parent / "examples" / "gitops"
HEALTH_LUA = GITOPS / "argocd-health-endpoint.lua"
ARGOCD_CM = GITOPS / "argocd-cm.yaml"
HEALTH_KEY = "resource.customizations.health.lockgate.dev_Endpoint"
NOW = "2026-11-22T18:00:00Z"


def health(endpoint: dict[str, Any]) -> dict[str, str]:
    """Argo CD's view of `endpoint`: the Lua run with `obj` set, as Argo CD runs it."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(endpoint, recursive=True)
    result = lua.execute(HEALTH_LUA.read_text())
    return {"status": result["status"], "message": result["message"]}


def endpoint(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "lockgate.dev/v1alpha1",
        "kind": "Endpoint",
        "metadata": {"name": "echo", "namespace": "default", "generation": generation},
        "spec": {"templateId": "echo"},
    }
    if status is not None:
        obj["status"] = status
    return obj


def built(checks: tuple[st.Check, ...] = (), deployment: dict | None = None, **kw: Any) -> dict:
    """A status as the operator writes it (kube/status.py), for generation 1."""
    observed = st.Observed(generation=1, checks=checks, deployment=deployment, **kw)
    return st.endpoint_status(
        observed, endpoint_id="echo", job_api_url="http://gw/v2/echo", previous=None, now=NOW
    )


def deployment(desired: int, ready: int) -> dict[str, Any]:
    return {
        "metadata": {"generation": 1},
        "spec": {"replicas": desired},
        "status": {"observedGeneration": 1, "replicas": desired, "readyReplicas": ready},
    }


# -- the health check -----------------------------------------------------------------------


def test_endpoint_without_status_is_progressing() -> None:
    assert health(endpoint(None))["status"] == "Progressing"


def test_ready_endpoint_is_healthy_with_the_operators_reason() -> None:
    found = health(endpoint(built(deployment=deployment(1, 1))))
    assert found["status"] == "Healthy", found
    assert "1 of 1 workers ready" in found["message"]


def test_endpoint_waiting_for_workers_is_progressing() -> None:
    found = health(endpoint(built(deployment=deployment(2, 0))))
    assert found["status"] == "Progressing" and "Initializing" in found["message"], found


def test_endpoint_whose_template_is_missing_is_progressing_with_the_reason() -> None:
    missing = st.Check("TemplateFound", False, "NotFound", "Template 'echo' not found")
    found = health(endpoint(built(checks=(missing,))))
    assert found["status"] == "Progressing", found
    assert "Template 'echo' not found" in found["message"]


def test_failed_endpoint_is_degraded_with_the_reason() -> None:
    bad = st.Check("SpecValid", False, "Invalid", "gpuCount must be at least 1", fatal=True)
    found = health(endpoint(built(checks=(bad,))))
    assert found == {"status": "Degraded", "message": "gpuCount must be at least 1"}


def test_ready_endpoint_whose_scaler_reads_no_metrics_is_degraded() -> None:
    blind = st.Check(st.METRICS_AVAILABLE, False, "MetricsUnreachable", "connection refused")
    found = health(endpoint(built(deployment=deployment(1, 1), scaling=blind)))
    assert found["status"] == "Degraded" and "connection refused" in found["message"], found


def test_crash_looping_endpoint_is_degraded_with_the_last_failed_start() -> None:
    loop = CrashLoop(failedStarts=5, exitCode=1, lastLine="cannot load the model", since=1)
    crash = st.crash_loop_check(loop, 5, "echo")
    found = health(endpoint(built(deployment=deployment(0, 0), crash_loop=crash)))
    assert found["status"] == "Degraded", found
    assert "exit code 1: cannot load the model" in found["message"]


def test_spec_change_not_yet_handled_is_progressing_whatever_the_phase() -> None:
    found = health(endpoint(built(deployment=deployment(1, 1)), generation=2))
    assert found["status"] == "Progressing", found


def test_unknown_phase_is_unknown() -> None:
    assert health(endpoint({"phase": "Sideways", "observedGeneration": 1}))["status"] == "Unknown"


def test_argocd_cm_carries_the_same_health_check() -> None:
    cm = yaml.safe_load(ARGOCD_CM.read_text())
    assert cm["data"][HEALTH_KEY] == HEALTH_LUA.read_text()


# -- the Application -----------------------------------------------------------------------


def application() -> dict[str, Any]:
    docs = yaml.safe_load_all((GITOPS / "argocd-application.yaml").read_text())
    [app] = [d for d in docs if d and d["kind"] == "Application"]
    return app


def test_deleting_the_application_never_cascades_to_the_crds() -> None:
    finalizers = application()["metadata"].get("finalizers") or []
    assert not [f for f in finalizers if f.startswith("resources-finalizer.argocd.argoproj.io")]


def test_application_prunes_last_and_applies_server_side() -> None:
    options = application()["spec"]["syncPolicy"]["syncOptions"]
    assert {"PruneLast=true", "ServerSideApply=true", "CreateNamespace=true"} <= set(options)


def test_application_renders_the_crds_kept_so_a_sync_never_prunes_them(tmp_path: Path) -> None:
    """The CRDs stay in what Argo CD renders (a resource that leaves it is pruned) and carry
    helm.sh/resource-policy: keep."""
    helm = find_helm()
    if helm is None:
        pytest.skip("helm missing: `make tools` installs it")
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(application()["spec"]["source"]["helm"]["valuesObject"]))
    out = subprocess.run(
        [helm, "template", "lockgate", str(CHART), "-n", "lockgate", "-f", str(values)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    crds = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CustomResourceDefinition"]
    names = {d["metadata"]["name"] for d in crds}
    assert {"endpoints.lockgate.dev", "templates.lockgate.dev"} <= names
    for crd in crds:
        policy = (crd["metadata"].get("annotations") or {}).get("helm.sh/resource-policy")
        assert policy == "keep", crd["metadata"]["name"]
