"""kopf's bookkeeping: which changes of an Endpoint make kopf call the reconcile handler."""

from __future__ import annotations

import kopf

from lockgate.kube.handlers import diffbase_storage, progress_storage


def endpoint(annotations: dict[str, str]) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "lockgate.dev/v1alpha1", "kind": "Endpoint",
            "metadata": {"name": "sdxl", "namespace": "ml", "annotations": annotations},
            "spec": {"templateId": "sdxl"},
        }
    )  # fmt: skip


def test_a_scaler_annotation_is_part_of_what_kopf_diffs() -> None:
    essence = diffbase_storage().build(body=endpoint({"lockgate.dev/scaler": "external"}))
    assert essence["metadata"]["annotations"] == {"lockgate.dev/scaler": "external"}


def test_kopfs_own_annotations_are_not() -> None:
    patch = kopf.Patch()
    body = endpoint({"lockgate.dev/scaler": "external"})
    diffbase_storage().store(body=body, patch=patch, essence=diffbase_storage().build(body=body))
    progress_storage().store(
        key=kopf.HandlerId("reconcile_endpoint"), record={"success": True}, body=body, patch=patch
    )
    written = dict(patch["metadata"]["annotations"])
    assert written and all(k.startswith("operator.lockgate.dev/") for k in written)
    stored = endpoint({**body.metadata.annotations, **written})
    essence = diffbase_storage().build(body=stored)
    assert essence["metadata"]["annotations"] == {"lockgate.dev/scaler": "external"}
