"""`KubernetesStorage`: registry credentials as `kubernetes.io/dockerconfigjson` Secrets,
network volumes as PersistentVolumeClaims, in the management API's namespace.

Each object is named by its id, so a template's `containerRegistryAuthId` is the worker
pods' `imagePullSecret` and an endpoint's `networkVolumeId` the claim they mount
(`kube.manifests`). The management API may create and delete Secrets but read none
(RBAC cannot narrow a rule to one Secret type, nor `create` to names): a credential's
name, username and registry are also kept in Redis, which is what lists show.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from lockgate.kube.cluster import Cluster, ClusterError, Conflict, NotFound
from lockgate.kube.settings import OperatorSettings
from lockgate.manage.storage import RecordExists, RecordNotFound, StorageRefused
from lockgate.models.registryauth import RegistryAuthSpec, docker_config, registry_auth_record
from lockgate.models.volumes import NetworkVolumeSpec
from lockgate.store import Registry, keys

Obj = dict[str, Any]
COMPONENT_LABEL = "app.kubernetes.io/component"
VOLUME_COMPONENT = "network-volume"
REGISTRY_AUTH_COMPONENT = "registry-auth"
NAME_ANNOTATION = "lockgate.dev/display-name"
DATA_CENTER_ANNOTATION = "lockgate.dev/data-center-id"
VOLUME_SELECTOR = f"{COMPONENT_LABEL}={VOLUME_COMPONENT}"


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "lockgate",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "lockgate",
        "app.kubernetes.io/managed-by": "lockgate-manage",
    }


def registry_secret(namespace: str, auth_id: str, auth: RegistryAuthSpec) -> Obj:
    """The credential's image pull Secret."""
    config = json.dumps(docker_config(auth), separators=(",", ":")).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": auth_id,
            "namespace": namespace,
            "labels": _labels(REGISTRY_AUTH_COMPONENT),
            "annotations": {NAME_ANNOTATION: auth.name},
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


def volume_claim(
    namespace: str, volume_id: str, spec: NetworkVolumeSpec, settings: OperatorSettings
) -> Obj:
    """The volume's PersistentVolumeClaim: `size` GiB, the chart's class and access mode."""
    claim: Obj = {
        "accessModes": [settings.volume_access_mode],
        "resources": {"requests": {"storage": f"{spec.size}Gi"}},
    }
    if settings.volume_storage_class:
        claim["storageClassName"] = settings.volume_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": volume_id,
            "namespace": namespace,
            "labels": _labels(VOLUME_COMPONENT),
            "annotations": {NAME_ANNOTATION: spec.name, DATA_CENTER_ANNOTATION: spec.dataCenterId},
        },
        "spec": claim,
    }


def gibibytes(quantity: str) -> int:
    """A claim's storage request in GiB (rounded up); 0 when it is not a plain size."""
    units = {"Gi": 1, "Ti": 1024, "Mi": 1 / 1024, "G": 1e9 / 2**30, "T": 1e12 / 2**30}
    for unit, factor in units.items():
        number = quantity.removesuffix(unit)
        if number != quantity and number.isdigit():
            return max(1, -int(-int(number) * factor // 1))
    return int(quantity) // 2**30 if quantity.isdigit() else 0


def volume_of_claim(obj: Obj) -> NetworkVolumeSpec:
    """A volume as its claim shows it."""
    meta = obj.get("metadata") or {}
    notes = meta.get("annotations") or {}
    storage = ((obj.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    return NetworkVolumeSpec.model_construct(
        name=notes.get(NAME_ANNOTATION) or meta.get("name", ""),
        size=gibibytes(str(storage or "0")),
        dataCenterId=notes.get(DATA_CENTER_ANNOTATION, ""),
    )


class KubernetesStorage:
    """Secrets and claims in `namespace`; credential records in Redis."""

    def __init__(
        self, cluster: Cluster, registry: Registry, *, namespace: str, settings: OperatorSettings
    ) -> None:
        self.cluster = cluster
        self.registry = registry
        self.namespace = namespace
        self.settings = settings

    async def create_registry_auth(self, auth_id: str, auth: RegistryAuthSpec) -> None:
        record = registry_auth_record(auth_id, auth.model_dump())
        if not await self.registry.add_record(keys.REGISTRY_AUTHS, auth_id, record):
            raise RecordExists(auth_id)
        try:
            await self.cluster.create(registry_secret(self.namespace, auth_id, auth))
        except Exception as err:  # no Secret: no record either
            await self.registry.delete_record(keys.REGISTRY_AUTHS, auth_id)
            if isinstance(err, Conflict):
                raise RecordExists(auth_id) from err
            raise

    async def list_registry_auths(self) -> dict[str, dict[str, Any]]:
        stored = await self.registry.list_records(keys.REGISTRY_AUTHS)
        return {i: registry_auth_record(i, e) for i, e in sorted(stored.items())}

    async def delete_registry_auth(self, auth_id: str) -> None:
        if await self.registry.get_record(keys.REGISTRY_AUTHS, auth_id) is None:
            raise RecordNotFound(auth_id)
        await self.cluster.delete("Secret", self.namespace, auth_id)  # gone already: fine
        await self.registry.delete_record(keys.REGISTRY_AUTHS, auth_id)

    async def create_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        try:
            await self.cluster.create(volume_claim(self.namespace, volume_id, spec, self.settings))
        except Conflict as err:
            raise RecordExists(volume_id) from err

    async def list_volumes(self) -> dict[str, NetworkVolumeSpec]:
        claims = await self.cluster.list_objects(
            "PersistentVolumeClaim", self.namespace, VOLUME_SELECTOR
        )
        found = {
            obj["metadata"]["name"]: volume_of_claim(obj)
            for obj in claims
            if not obj["metadata"].get("deletionTimestamp")  # deleted, held by a finalizer
        }
        return dict(sorted(found.items()))

    async def replace_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        """A new name; a larger size is a resize, which the StorageClass must allow
        (`allowVolumeExpansion`), else the API server refuses it."""
        current = await self.cluster.read("PersistentVolumeClaim", self.namespace, volume_id)
        if current is None:
            raise RecordNotFound(volume_id)
        patch: Obj = {"metadata": {"annotations": {NAME_ANNOTATION: spec.name}}}
        if spec.size != volume_of_claim(current).size:  # the request as written stays else
            patch["spec"] = {"resources": {"requests": {"storage": f"{spec.size}Gi"}}}
        try:
            await self.cluster.merge_patch(
                "PersistentVolumeClaim", self.namespace, volume_id, patch
            )
        except NotFound as err:
            raise RecordNotFound(volume_id) from err
        except ClusterError as err:
            if err.status not in (403, 422):
                raise
            raise StorageRefused(f"size: the cluster refused the resize: {err}") from err

    async def delete_volume(self, volume_id: str) -> None:
        if not await self.cluster.delete("PersistentVolumeClaim", self.namespace, volume_id):
            raise RecordNotFound(volume_id)
