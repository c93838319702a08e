"""An endpoint's registry entry: the record in Redis (`store.Registry`, hash `endpoints`)
that the gateway, the scaler, the key API and dev mode read about an endpoint. Its writers
are the operator (`kube.registry_record.registry_entry`) and dev mode (`dev.controlplane`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from lockgate.models.crashloop import CrashLoop
from lockgate.models.endpoint import EndpointSpec, EndpointType, WorkerLostPolicy
from lockgate.models.warmup import Warmup

# An entry without a setting has the spec's default for it: the defaults live in EndpointSpec.
_SPEC = EndpointSpec()

# What writers add to the spec's fields; each one a writer leaves unset (None) is not stored,
# as before this model: the operator writes no dev-mode field and dev mode no namespace.
ADDED = (
    "namespace",
    "uid",
    "scaler",
    "workerKeyDigest",
    "jobApiUrl",
    "origin",
    "workDir",
    "version",
    "createdAt",
    "crashLoop",
)


class RegistryEntry(BaseModel):
    """An endpoint's settings (the spec's fields, flat, in its camelCase) and what its writer
    adds. Stored as `stored()`'s JSON object, the same keys and values as the untyped dict
    written before it, so gateways of either version read what the other's operator wrote.

    A tolerant reader: the settings read on every request (gateway) or decision (scaler) are
    typed here with the spec's defaults, without the spec's input rules (the writer validated
    the spec; tests store shorter timeouts than the API accepts). The spec's other fields, and
    any key a newer writer adds, are kept as written: `settings()`, `spec()`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    # -- the spec's settings that readers read one by one
    type: EndpointType = _SPEC.type
    executionTimeoutMs: int = _SPEC.executionTimeoutMs
    requestTimeoutS: int = _SPEC.requestTimeoutS
    lbHoldS: int | None = _SPEC.lbHoldS  # None: the gateway's LOCKGATE_LB_HOLD_S
    lbWebSocketMaxS: int = _SPEC.lbWebSocketMaxS
    workersMin: int = _SPEC.workersMin
    workersMax: int = _SPEC.workersMax  # the gateway's `/health` says when it holds jobs back
    replicas: int | None = _SPEC.replicas
    onWorkerLost: WorkerLostPolicy = _SPEC.onWorkerLost  # written on to `lost` (store.registry)
    requeueMaxRunS: int = _SPEC.requeueMaxRunS
    warmup: Warmup | None = _SPEC.warmup
    lbResumeWindowS: int = _SPEC.lbResumeWindowS  # the scaler parks LB workers this long
    startupTimeout: int = _SPEC.startupTimeout  # the scalers' startup deadline (s)
    crashLoopThreshold: int = _SPEC.crashLoopThreshold
    # -- the operator's: the Endpoint's namespace (ids are cluster-wide) and uid; "external"
    # when another scaler owns the worker count (the Endpoint's scaler annotation)
    namespace: str | None = None
    uid: str | None = None
    scaler: str | None = None
    # -- both writers': the SHA-256 of the endpoint's worker key, and its job API's URL
    workerKeyDigest: str | None = None
    jobApiUrl: str | None = None
    # -- dev mode's, to resume the endpoint at its next start: who made it (the command
    # line or the API), where its handler's paths resolve, its version and creation time,
    # and the API's edits of the command line's endpoint (spec fields as JSON values)
    origin: str | None = None
    workDir: str | None = None
    version: int | None = None
    createdAt: str | None = None
    edits: dict[str, Any] = {}
    # -- both writers': set while the endpoint starts no worker (`models.crashloop`), so the
    # gateway can say so in the answer to a new job without another Redis call
    crashLoop: CrashLoop | None = None

    def stored(self) -> dict[str, Any]:
        """The JSON object kept in Redis: every field, but the additions left unset."""
        unset = {name for name in ADDED if getattr(self, name) is None}
        if not self.edits:
            unset.add("edits")
        return self.model_dump(mode="json", exclude=unset)

    def settings(self) -> dict[str, Any]:
        """The spec's fields as stored (JSON values); absent ones are left out."""
        return {k: v for k, v in self.stored().items() if k in EndpointSpec.model_fields}

    def spec(self) -> EndpointSpec:
        """The endpoint's spec, checked against the spec's rules (pydantic's
        `ValidationError` when an entry no longer satisfies them)."""
        return EndpointSpec.model_validate(self.settings())
