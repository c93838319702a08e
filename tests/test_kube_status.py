"""Endpoint status as a pure function of what the operator observed."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.kube.status import (
    DEPLOYMENT_AVAILABLE,
    READY,
    REGISTERED,
    SPEC_VALID,
    TEMPLATE_FOUND,
    Activity,
    Check,
    Observed,
    at_rest,
    endpoint_status,
    merge_conditions,
    phase,
    rest_confirmed,
    resync_may_wait,
    shows,
)
from lockgate.models import Phase

VALID = Check(SPEC_VALID, True, "Valid")
FOUND = Check(TEMPLATE_FOUND, True, "Found")
REGISTERED_OK = Check(REGISTERED, True, "Registered")
ALL_OK = [VALID, FOUND, REGISTERED_OK]


def deployment(desired: int, ready: int = 0, *conditions: dict) -> dict[str, Any]:
    return {
        "spec": {"replicas": desired},
        "status": {"readyReplicas": ready, "conditions": list(conditions)},
    }


STALLED = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}


@pytest.mark.parametrize(
    ("checks", "observed", "expected"),
    [
        ([Check(SPEC_VALID, False, "InvalidSpec", "x", fatal=True)], None, Phase.FAILED),
        ([VALID, Check(TEMPLATE_FOUND, False, "TemplateNotFound", "x")], None, Phase.PENDING),
        (
            [VALID, Check(TEMPLATE_FOUND, False, "TemplateInvalid", "x", fatal=True)],
            None,
            Phase.FAILED,
        ),
        (ALL_OK, None, Phase.INITIALIZING),
        (ALL_OK, deployment(0), Phase.READY),
        (ALL_OK, deployment(2, 0), Phase.INITIALIZING),
        (ALL_OK, deployment(2, 1), Phase.READY),
        (ALL_OK, deployment(2, 0, STALLED), Phase.FAILED),
        (ALL_OK, deployment(2, 2, STALLED), Phase.READY),
    ],
)
def test_phase_follows_checks_then_workers(
    checks: list[Check], observed: dict | None, expected: Phase
) -> None:
    assert phase(checks, observed)[0] == expected


def test_status_reports_ids_counts_and_generation() -> None:
    observed = Observed(
        generation=4,
        checks=ALL_OK,
        deployment=deployment(3, 1),
        activity=Activity(idle=1, running=2, in_queue=7, in_progress=2),
    )
    status = endpoint_status(
        observed, endpoint_id="ep", job_api_url="u/v2/ep/", previous=None, now="T1"
    )
    assert status["phase"] == "Ready"
    assert (status["endpointId"], status["jobApiUrl"], status["observedGeneration"]) == (
        "ep",
        "u/v2/ep/",
        4,
    )
    assert status["workers"] == {"desired": 3, "ready": 1, "idle": 1, "running": 2}
    assert status["jobs"] == {"inQueue": 7, "inProgress": 2}
    types = [c["type"] for c in status["conditions"]]
    assert types == [SPEC_VALID, TEMPLATE_FOUND, REGISTERED, DEPLOYMENT_AVAILABLE, READY]


def test_deployment_available_mirrors_the_deployment_condition() -> None:
    available = {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}
    observed = Observed(generation=1, checks=ALL_OK, deployment=deployment(1, 0, available))
    status = endpoint_status(observed, endpoint_id="e", job_api_url="u", previous=None, now="T")
    cond = next(c for c in status["conditions"] if c["type"] == DEPLOYMENT_AVAILABLE)
    assert (cond["status"], cond["reason"]) == ("False", "MinimumReplicasUnavailable")


def test_transition_time_is_kept_while_a_condition_holds() -> None:
    first = merge_conditions([], [VALID], "T1")
    again = merge_conditions([c.model_dump() for c in first], [VALID], "T2")
    flipped = merge_conditions(
        [c.model_dump() for c in first], [Check(SPEC_VALID, False, "InvalidSpec")], "T3"
    )
    assert again[0].lastTransitionTime == "T1"
    assert flipped[0].lastTransitionTime == "T3"


def test_status_json_leaves_empty_strings_out() -> None:
    observed = Observed(generation=1, checks=[VALID], deployment=deployment(0))
    status = endpoint_status(observed, endpoint_id="e", job_api_url="u", previous=None, now="T")
    valid = status["conditions"][0]
    assert "message" not in valid and valid["reason"] == "Valid"


BLIND = Check("MetricsAvailable", False, "GatewayUnreachable", "holding")


def test_a_ready_endpoint_whose_metrics_cannot_be_read_is_degraded() -> None:
    observed = Observed(generation=1, checks=ALL_OK, deployment=deployment(0), scaling=BLIND)
    status = endpoint_status(
        observed, endpoint_id="ep", job_api_url="u", previous=None, now="2024-01-01T00:00:00Z"
    )
    assert status["phase"] == "Degraded"
    [cond] = [c for c in status["conditions"] if c["type"] == "MetricsAvailable"]
    assert (cond["status"], cond["reason"]) == ("False", "GatewayUnreachable")
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "Degraded")
    assert "holding" in ready["message"]


@pytest.mark.parametrize(
    ("checks", "observed", "expected"),
    [
        ([VALID, Check(TEMPLATE_FOUND, False, "TemplateNotFound", "x")], None, Phase.PENDING),
        (ALL_OK, deployment(2, 0), Phase.INITIALIZING),
        (ALL_OK, deployment(2, 0, STALLED), Phase.FAILED),
    ],
)
def test_blind_metrics_leave_a_phase_that_is_not_ready_alone(
    checks: list[Check], observed: dict | None, expected: Phase
) -> None:
    seen = Observed(generation=1, checks=checks, deployment=observed, scaling=BLIND)
    status = endpoint_status(seen, endpoint_id="ep", job_api_url="u", previous=None, now="T")
    assert status["phase"] == expected


def test_metrics_read_again_make_it_ready_and_a_replica_without_the_scaler_keeps_degraded() -> None:
    seeing = Check("MetricsAvailable", True, "Scraped", "")
    observed = Observed(generation=1, checks=ALL_OK, deployment=deployment(0), scaling=seeing)
    ready = endpoint_status(observed, endpoint_id="e", job_api_url="u", previous=None, now="T")
    assert ready["phase"] == "Ready"
    before = {"conditions": [{"type": "MetricsAvailable", "status": "False", "message": "m"}]}
    other = Observed(generation=1, checks=ALL_OK, deployment=deployment(0))
    status = endpoint_status(other, endpoint_id="e", job_api_url="u", previous=before, now="T")
    assert status["phase"] == "Degraded"


def test_status_carries_the_scale_subresource_fields() -> None:
    observed = Observed(generation=1, checks=ALL_OK, deployment=deployment(3, 1))
    observed.deployment["status"]["replicas"] = 3
    status = endpoint_status(observed, endpoint_id="ep", job_api_url="u", previous=None, now="T")
    assert status["replicas"] == 3
    assert status["selector"] == "app.kubernetes.io/component=worker,lockgate.dev/endpoint=ep"


def test_a_replica_without_the_scaler_keeps_the_metrics_condition_it_found() -> None:
    # Only the scaler Lease's holder reads /metrics; another replica's reconcile must
    # neither drop its condition nor restamp it.
    before = {"type": "MetricsAvailable", "status": "False", "reason": "GatewayUnreachable"}
    before |= {"message": "holding", "lastTransitionTime": "T0"}
    observed = Observed(generation=1, checks=ALL_OK, deployment=deployment(0))
    status = endpoint_status(
        observed, endpoint_id="ep", job_api_url="u", previous={"conditions": [before]}, now="T1"
    )
    assert [c for c in status["conditions"] if c["type"] == "MetricsAvailable"] == [before]
    fresh = endpoint_status(observed, endpoint_id="ep", job_api_url="u", previous=None, now="T1")
    assert not [c for c in fresh["conditions"] if c["type"] == "MetricsAvailable"]


READY_IDLE = {
    "phase": "Ready",
    "workers": {"desired": 0, "ready": 0, "idle": 0, "running": 0},
    "jobs": {"inQueue": 0, "inProgress": 0},
}


@pytest.mark.parametrize(
    ("change", "rests"),
    [
        ({}, True),
        ({"phase": "Initializing"}, False),  # not Ready: resync at the usual period
        ({"workers": {"desired": 1, "ready": 0, "idle": 0, "running": 0}}, False),  # scaled up
        ({"workers": {"desired": 0, "ready": 0, "idle": 1, "running": 0}}, False),
        ({"jobs": {"inQueue": 1, "inProgress": 0}}, False),
        ({"jobs": {"inQueue": 0, "inProgress": 2}}, False),
        ({"workers": None, "jobs": None}, False),  # no counts yet
    ],
)
def test_an_endpoint_at_rest_is_ready_with_no_worker_and_no_job(change: dict, rests: bool) -> None:
    assert at_rest({**READY_IDLE, **change}) is rests
    assert not at_rest(None)


def test_a_resync_waits_only_at_rest_and_within_the_rest_interval() -> None:
    assert resync_may_wait(READY_IDLE, since_s=30, rest_s=60)
    assert not resync_may_wait(READY_IDLE, since_s=61, rest_s=60)  # the full resync is due
    busy = {**READY_IDLE, "jobs": {"inQueue": 1, "inProgress": 0}}
    assert not resync_may_wait(busy, since_s=1, rest_s=60)


def test_a_rest_holds_while_the_watched_deployment_agrees_with_the_status() -> None:
    available = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability."}  # fmt: skip
    shown = {"type": DEPLOYMENT_AVAILABLE, "status": "True", "reason": available["reason"],
             "message": available["message"]}  # fmt: skip
    status = {**READY_IDLE, "conditions": [shown]}
    assert rest_confirmed(status, deployment(0, 0, available))
    assert not rest_confirmed(status, None)  # deleted: the resync re-creates it now
    assert not rest_confirmed(status, deployment(1, 0, available))  # scaled from outside
    with_pod = deployment(0, 0, available)
    with_pod["status"]["replicas"] = 1  # a pod still going away
    assert not rest_confirmed(status, with_pod)
    # Its controller has just observed it: the status says "no status yet", so not at rest
    # until a full resync has brought the condition over (not a rest period later).
    unseen = {"type": DEPLOYMENT_AVAILABLE, "status": "Unknown", "reason": "NotObservedYet",
              "message": "the Deployment has no status yet"}  # fmt: skip
    assert not rest_confirmed({**READY_IDLE, "conditions": [unseen]}, deployment(0, 0, available))


def test_a_status_shows_a_check_only_with_its_status_reason_and_message() -> None:
    scraped = Check("MetricsAvailable", True, "Scraped", "the scaler reads /metrics")
    crash = Check("WorkersHealthy", False, "CrashLoop", "worker-1: boom")
    status = {"conditions": [
        {"type": "MetricsAvailable", "status": "True", "reason": "Scraped",
         "message": "the scaler reads /metrics", "lastTransitionTime": "2026-11-28T00:00:00Z"},
        {"type": "WorkersHealthy", "status": "False", "reason": "CrashLoop",
         "message": "worker-0: boom"},
    ]}  # fmt: skip
    assert shows(status, [scraped])
    assert not shows(status, [scraped, crash])  # another pod's message: refreshed
    assert not shows(status, [Check("MetricsAvailable", False, "Scraped", "x")])
    assert not shows(None, [scraped]) and shows(None, [])
