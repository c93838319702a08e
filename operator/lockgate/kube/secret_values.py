"""`KubernetesSecretValues`: each account secret's value in a Secret of the endpoints'
namespace (docs/secrets.md), which worker pods read through a `secretKeyRef`.

The Secret (`models.secrets.object_name`) carries `app.kubernetes.io/managed-by:
lockgate-manage`, the secret's id as `lockgate.dev/account-secret`, its RunPod name as an
annotation, and `lockgate.dev/worker-secret: "true"`: the opt-in the operator's
`check_secrets` asks of every Secret a worker reads (docs/security.md, "Hardening"). It has
no `app.kubernetes.io/part-of: lockgate` label, which would mark it lockgate's own and
refuse it to workers. The management API writes it (create, update, delete) and never
reads it back: RBAC gives it no `get`, `list`, `watch` nor `patch` on Secrets.
"""

from __future__ import annotations

from typing import Any

from lockgate.kube.cluster import Cluster, ClusterError, Conflict, NotFound
from lockgate.manage.secrets import SecretValueRefused
from lockgate.models import secrets
from lockgate.models.podfields import WORKER_SECRET_LABEL

Obj = dict[str, Any]
COMPONENT = "account-secret"


def value_secret(namespace: str, name: str, value: str) -> Obj:
    """The Secret holding the value of the account secret `name`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secrets.object_name(name),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "lockgate",
                "app.kubernetes.io/component": COMPONENT,
                "app.kubernetes.io/managed-by": "lockgate-manage",
                secrets.ID_LABEL: secrets.secret_id(name),
                WORKER_SECRET_LABEL: "true",
            },
            "annotations": {secrets.NAME_ANNOTATION: name},
        },
        "type": "Opaque",
        "stringData": {secrets.VALUE_KEY: value},
    }


class KubernetesSecretValues:
    """Values as Secrets in `namespace` (the management API's: where Endpoints are)."""

    def __init__(self, cluster: Cluster, *, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    async def write(self, name: str, value: str, *, new: bool) -> None:
        """Create the Secret (`new`), else replace it whole (an update: a merge patch would
        need `patch`, whose answer is the whole Secret, a read of any Secret of the
        namespace); a Secret left behind by an earlier secret of the same name is
        replaced, one gone is made again."""
        obj = value_secret(self.namespace, name, value)
        try:
            if new:
                await self._create_or_replace(obj)
            else:
                await self._replace_or_create(obj)
        except ClusterError as err:
            if err.status in (400, 413, 422):  # e.g. over the 1 MiB a Secret may hold
                raise SecretValueRefused(f"value: the cluster refused it: {err}") from err
            raise

    async def _create_or_replace(self, obj: Obj) -> None:
        try:
            await self.cluster.create(obj)
        except Conflict:
            await self.cluster.replace(obj)

    async def _replace_or_create(self, obj: Obj) -> None:
        try:
            await self.cluster.replace(obj)
        except NotFound:
            await self.cluster.create(obj)

    async def remove(self, name: str) -> None:
        await self.cluster.delete("Secret", self.namespace, secrets.object_name(name))
