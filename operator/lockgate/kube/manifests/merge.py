"""What a write changes: the content hash an applied object carries (equal hashes, nothing
to write), and the replacement of an existing object that keeps what other writers own."""

from __future__ import annotations

import copy
import hashlib
import json

from lockgate.kube.manifests.names import (
    ANNOTATION_PREFIX,
    HASH_ANNOTATION,
    POD_ANNOTATIONS_ANNOTATION,
    Obj,
)


def content_hash(obj: Obj) -> str:
    """A short digest of an object as built: equal hashes mean nothing to apply."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: Obj) -> Obj:
    """A copy of `obj` carrying its content hash as an annotation."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = content_hash(obj)
    return out


def hash_of(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION)


def _theirs(mapping: dict[str, str] | None) -> dict[str, str]:
    """Labels or annotations that another writer added (not ours to remove)."""
    return {k: v for k, v in (mapping or {}).items() if not k.startswith(ANNOTATION_PREFIX)}


def updated(existing: Obj, desired: Obj) -> Obj:
    """`desired`, ready to replace `existing`: it keeps what others own there.

    The replica count stays (the scaler owns it after creation), as do labels and
    annotations other tools added (e.g. `kubectl rollout restart` on the pod template);
    the write is conditional on the resourceVersion that was read."""
    out = copy.deepcopy(desired)
    meta, old_meta = out["metadata"], existing.get("metadata") or {}
    meta["resourceVersion"] = old_meta.get("resourceVersion")
    meta["labels"] = {**_theirs(old_meta.get("labels")), **meta.get("labels", {})}
    meta["annotations"] = {**_theirs(old_meta.get("annotations")), **meta.get("annotations", {})}
    old_spec = existing.get("spec") or {}
    if "replicas" in out.get("spec", {}) and "replicas" in old_spec:
        out["spec"]["replicas"] = old_spec["replicas"]
    if "template" in out.get("spec", {}):
        old = (old_spec.get("template") or {}).get("metadata") or {}
        tpl = out["spec"]["template"].setdefault("metadata", {})
        theirs = _theirs(old.get("annotations"))
        for key in (old.get("annotations") or {}).get(POD_ANNOTATIONS_ANNOTATION, "").split(","):
            theirs.pop(key, None)
        tpl["annotations"] = {**theirs, **tpl.get("annotations", {})}
    return out
