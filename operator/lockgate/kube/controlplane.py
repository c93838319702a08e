"""`KubernetesControlPlane`: endpoints as Endpoint custom resources; the operator does the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from lockgate.kube.cluster import Cluster, Conflict, NotFound
from lockgate.kube.crds import API_VERSION, ENDPOINT, omit_empty_strings
from lockgate.kube.podlogs import PodLogs
from lockgate.manage.controlplane import EndpointExists, EndpointNotFound
from lockgate.models import EndpointRecord, EndpointSpec, EndpointStatus


def record_from_resource(obj: Mapping[str, Any], job_api_url: str) -> EndpointRecord:
    """An Endpoint resource as a record. A spec that the API server let through but that
    fails validation (e.g. `workersMin > workersMax`) is shown as stored; its status says
    what is wrong."""
    endpoint_id = obj["metadata"]["name"]
    raw = dict(obj.get("spec") or {})
    status = EndpointStatus.model_validate(obj.get("status") or {})
    try:
        settings = EndpointSpec.model_validate(raw).model_dump()
    except ValidationError:
        settings = {**EndpointSpec().model_dump(), **raw}
    return EndpointRecord.model_construct(
        id=endpoint_id, jobApiUrl=job_api_url, status=status, **settings
    )


class KubernetesControlPlane:
    """Endpoints as Endpoint custom resources in one namespace."""

    def __init__(
        self, cluster: Cluster, *, namespace: str, job_api_url: Callable[[str], str]
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.job_api_url = job_api_url
        self.logs = PodLogs(cluster, namespace)  # the worker pods' logs

    def _record(self, obj: Mapping[str, Any]) -> EndpointRecord:
        return record_from_resource(obj, self.job_api_url(obj["metadata"]["name"]))

    async def create(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        body = {
            "apiVersion": API_VERSION,
            "kind": ENDPOINT.kind,
            "metadata": {"name": endpoint_id, "namespace": self.namespace},
            "spec": omit_empty_strings(spec.model_dump(mode="json")),
        }
        try:
            return self._record(await self.cluster.create_endpoint(self.namespace, body))
        except Conflict as err:
            raise EndpointExists(endpoint_id) from err

    async def get(self, endpoint_id: str) -> EndpointRecord:
        obj = await self.cluster.get_endpoint(self.namespace, endpoint_id)
        if obj is None:
            raise EndpointNotFound(endpoint_id)
        return self._record(obj)

    async def list(self) -> list[EndpointRecord]:
        items = await self.cluster.list_endpoints(self.namespace)
        return sorted((self._record(obj) for obj in items), key=lambda r: r.id)

    async def patch(self, endpoint_id: str, spec: EndpointSpec) -> EndpointRecord:
        # A merge patch of every field (lists are replaced, not merged); null removes a
        # field, so an emptied string goes back to its default.
        fields = spec.model_dump(mode="json")
        patch = {"spec": {k: (None if v == "" else v) for k, v in fields.items()}}
        try:
            obj = await self.cluster.patch_endpoint(self.namespace, endpoint_id, patch)
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err
        return self._record(obj)

    async def delete(self, endpoint_id: str) -> None:
        try:
            await self.cluster.delete_endpoint(self.namespace, endpoint_id)
        except NotFound as err:
            raise EndpointNotFound(endpoint_id) from err
