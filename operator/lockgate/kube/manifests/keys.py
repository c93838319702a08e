"""The worker key's Secret, and where the key and its digest are read back from."""

from __future__ import annotations

import base64

from lockgate.kube.manifests.names import KEY_DIGEST_ANNOTATION, Obj, Owner, metadata, secret_name

SECRET_KEY = "RUNPOD_AI_API_KEY"  # the Secret's data key holding the worker key


def worker_key_secret(owner: Owner, worker_key: str) -> Obj:
    """The Secret workers read their key from."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata(owner, secret_name(owner.name), "worker-key"),
        "stringData": {SECRET_KEY: worker_key},
    }


def key_digest_of(deployment: Obj) -> str | None:
    """The worker key's digest a worker Deployment carries, if any."""
    return ((deployment.get("metadata") or {}).get("annotations") or {}).get(KEY_DIGEST_ANNOTATION)


def secret_key(secret: Obj) -> str | None:
    """The worker key held by a Secret as the API returns it; None when it holds none."""
    value = (secret.get("data") or {}).get(SECRET_KEY)
    return base64.b64decode(value).decode() if value else None
