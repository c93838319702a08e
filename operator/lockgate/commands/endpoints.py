"""`lockgate endpoints list|get|create|edit|delete` over RunPod's REST v2 (`/v2/serverless`),
and `lockgate templates list|get` (`/v1/templates`); admin keys.

The table's state, ready, queued and why columns are lockgate's own (no v2 field has them):
they come from the endpoint's `status` in `/v1/endpoints` (the state as the console's badge
says it: `commands.state`; `get` reads `/health` too), read beside the v2 object, as
does `--lb-hold-s` (lockgate's setting, which v2 has no field for).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lockgate.client import ApiClient, ClientError
from lockgate.commands.session import emit
from lockgate.commands.state import endpoint_state

ENDPOINT_COLUMNS = ("id", "name", "type", "state", "workers", "ready", "queued", "job api", "why")
TEMPLATE_COLUMNS = ("id", "name", "image", "category", "serverless")
V2 = "/v2/serverless"
V2_TYPE = {"QUEUE": "QUEUE", "LB": "LOAD_BALANCER", "LOAD_BALANCER": "LOAD_BALANCER"}
SCALING_VALUE = {"QUEUE_DELAY": "queueDelay", "REQUEST_COUNT": "requestCount"}
CREATE_WORKERS = {"min": 0, "max": 3}  # RunPod's v2 defaults, to complete a partial --workers-*
CREATE_QUEUE_DELAY_S = 4  # the scaling a QUEUE endpoint gets when none is given (v1's default)
# The named flags that set a v2 field as they are.
FLAG_FIELDS = {"name": "name", "template_id": "templateId", "image": "image", "args": "args"}
WORKER_FLAGS = {"workers_min": "min", "workers_max": "max", "idle_timeout": "idleTimeout"}


def job_api_url(endpoint: dict[str, Any]) -> str | None:
    """Where the endpoint's clients send work: its job API (`…/v2/{id}/`) or LB route."""
    urls = endpoint.get("requestUrls") or {}
    if "base" in urls:
        return str(urls["base"])
    run = urls.get("run")
    return str(run).removesuffix("run") if run else None


def endpoint_row(endpoint: dict[str, Any], health: dict[str, Any] | None = None) -> list[Any]:
    """One v2 endpoint (with lockgate's `status` of it) as a table row: its state as the
    console's badge says it (`commands.state`), and why when something is wrong."""
    status = endpoint.get("status") or {}
    workers = endpoint.get("workers") or {}
    state = endpoint_state(status, health)
    return [
        endpoint.get("id"),
        endpoint.get("name"),
        endpoint.get("type"),
        state.label,
        f"{workers.get('min', 0)}-{workers.get('max', 0)}",
        (status.get("workers") or {}).get("ready", 0),
        (status.get("jobs") or {}).get("inQueue", 0),
        job_api_url(endpoint),
        state.why or (health or {}).get("waiting") or "",
    ]


def template_row(record: dict[str, Any]) -> list[Any]:
    """One template as a table row."""
    return [
        record.get("id"),
        record.get("name"),
        record.get("imageName") or record.get("image"),
        record.get("category"),
        record.get("isServerless"),
    ]


def value_of(text: str) -> Any:
    """A `--set` value: JSON when it parses (numbers, lists, objects), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def given_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The v2 fields of `-f FILE`, then `--set FIELD=VALUE` over them."""
    body: dict[str, Any] = {}
    if getattr(args, "file", None):
        try:
            loaded = json.loads(Path(args.file).read_text())
        except (OSError, ValueError) as err:
            raise ClientError(f"-f {args.file}: not a readable JSON file ({err})") from err
        if not isinstance(loaded, dict):
            raise ClientError(f"-f {args.file}: the file must hold a JSON object of fields")
        body.update(loaded)
    for item in getattr(args, "set", None) or []:
        field, sep, text = item.partition("=")
        if not sep or not field:
            raise ClientError(f"--set {item!r}: write FIELD=VALUE, e.g. --set name=my-endpoint")
        body[field] = value_of(text)
    return body


def object_in(body: dict[str, Any], field: str) -> dict[str, Any]:
    """`body[field]` when it is a JSON object ({} when absent); a one-line refusal else."""
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClientError(f"--set {field}: give a JSON object, e.g. --set {field}='{{...}}'")
    return value


def _workers(args: argparse.Namespace, body: dict[str, Any], current: dict[str, Any]) -> None:
    flags = {
        v2: value
        for flag, v2 in WORKER_FLAGS.items()
        if (value := getattr(args, flag, None)) is not None
    }
    if flags:
        # v2's `workers` is one object with min and max: the others keep their values
        shown = {
            k: v
            for k, v in (current.get("workers") or CREATE_WORKERS).items()
            if k != "idleTimeout"
        }
        body["workers"] = {**shown, **object_in(body, "workers"), **flags}


def _scaling(
    args: argparse.Namespace, body: dict[str, Any], current: dict[str, Any] | None
) -> None:
    """`scaling` from --scaler-type/--scaler-value (the other from the endpoint as it is);
    on create with none, a QUEUE endpoint's default (an LB endpoint must say)."""
    kind, value = getattr(args, "scaler_type", None), getattr(args, "scaler_value", None)
    if kind is None and value is None:
        queue = V2_TYPE.get(body.get("type", "QUEUE")) == "QUEUE"
        if current is None and "scaling" not in body and queue:
            body["scaling"] = {"type": "QUEUE_DELAY", "queueDelay": CREATE_QUEUE_DELAY_S}
        return
    before = object_in(body, "scaling") or (current or {}).get("scaling") or {}
    kind = kind or before.get("type") or "QUEUE_DELAY"
    if value is None:
        value = before.get(SCALING_VALUE[kind]) if before.get("type") == kind else None
        if value is None:
            raise ClientError(f"--scaler-type {kind}: give --scaler-value with it")
    body["scaling"] = {"type": kind, SCALING_VALUE[kind]: value}


def _timeout(args: argparse.Namespace, body: dict[str, Any]) -> None:
    queue_ms, lb_s = (
        getattr(args, "execution_timeout_ms", None),
        getattr(args, "request_timeout_s", None),
    )
    if queue_ms is not None and lb_s is not None:
        raise ClientError("--execution-timeout-ms, --request-timeout-s: give one (v2's timeout)")
    if queue_ms is not None:
        body["timeout"] = queue_ms
    elif lb_s is not None:
        body["timeout"] = lb_s * 1000


def _compute(args: argparse.Namespace, body: dict[str, Any]) -> None:
    if pools := getattr(args, "gpu", None):
        body["gpu"] = {**object_in(body, "gpu"), "pools": pools}
    if flavors := getattr(args, "cpu", None):
        body["cpu"] = [{"id": f, "vcpuCount": args.vcpu_count} for f in flavors]


def v2_body(args: argparse.Namespace, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The v2 body `create` (`current` None) or `edit` (`current`: the endpoint as it is)
    sends: `-f FILE`, then `--set`, then the named flags, each over the one before."""
    body = given_fields(args)
    for flag, field in FLAG_FIELDS.items():
        if (value := getattr(args, flag, None)) is not None:
            body[field] = value
    if getattr(args, "type", None) is not None:
        body["type"] = V2_TYPE[args.type]
    _compute(args, body)
    _workers(args, body, current or {})
    _scaling(args, body, current)
    _timeout(args, body)
    return body


def path_of(endpoint_id: str, version: str = V2) -> str:
    base = "/v1/endpoints" if version == "v1" else V2
    return f"{base}/{quote(endpoint_id, safe='')}"


async def status_of(api: ApiClient, endpoint_id: str) -> dict[str, Any]:
    """lockgate's `status` of an endpoint (phase, workers, jobs): v1's, v2 has none."""
    record = await api.call("GET", path_of(endpoint_id, "v1"))
    return (record or {}).get("status") or {}


async def show(args: argparse.Namespace, api: ApiClient, endpoint: dict[str, Any]) -> None:
    """Print one v2 endpoint with lockgate's `status` beside it."""
    shown = {**endpoint, "status": await status_of(api, endpoint["id"])}
    try:  # the job API's counts, where this URL serves it (dev mode; a cluster: --url's)
        health = await api.call("GET", f"/v2/{quote(endpoint['id'], safe='')}/health")
    except ClientError:
        health = None
    emit(args, shown, ENDPOINT_COLUMNS, [endpoint_row(shown, health)])


async def hold_for(args: argparse.Namespace, api: ApiClient, endpoint_id: str) -> None:
    """`--lb-hold-s`: lockgate's own setting, which only `/v1/endpoints` has."""
    if getattr(args, "lb_hold_s", None) is not None:
        await api.call("PATCH", path_of(endpoint_id, "v1"), body={"lbHoldS": args.lb_hold_s})


async def list_endpoints(args: argparse.Namespace, api: ApiClient) -> None:
    answer = await api.call("GET", V2)
    endpoints = (answer.get("endpoints") if isinstance(answer, dict) else None) or []
    if endpoints:
        statuses = {r["id"]: r.get("status") or {} for r in await api.call("GET", "/v1/endpoints")}
        endpoints = [{**e, "status": statuses.get(e["id"], {})} for e in endpoints]
    emit(args, endpoints, ENDPOINT_COLUMNS, [endpoint_row(e) for e in endpoints])


async def get_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    await show(args, api, await api.call("GET", path_of(args.endpoint)))


async def create_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    if args.id:
        raise ClientError(
            "--id: v2 gives a new endpoint a generated id (RunPod's rule); to choose the id, "
            "create it through POST /v1/endpoints or kubectl"
        )
    body = v2_body(args)
    if not body.get("templateId") and not body.get("image"):
        raise ClientError("give --template-id or --image (and --args: the command to run)")
    body.setdefault("name", body.get("templateId") or body["image"])
    body.setdefault("type", "QUEUE")
    endpoint = await api.call("POST", V2, body=body)
    await hold_for(args, api, endpoint["id"])
    await show(args, api, endpoint)


async def edit_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    partial = any(
        getattr(args, f, None) is not None for f in [*WORKER_FLAGS, "scaler_type", "scaler_value"]
    )
    current = await api.call("GET", path_of(args.endpoint)) if partial else {}
    body = v2_body(args, current or {})
    if not body and getattr(args, "lb_hold_s", None) is None:
        raise ClientError("nothing to change: give --set FIELD=VALUE, a named flag or -f FILE")
    if body:
        endpoint = await api.call("PATCH", path_of(args.endpoint), body=body)
    await hold_for(args, api, args.endpoint)
    if not body:
        endpoint = await api.call("GET", path_of(args.endpoint))
    await show(args, api, endpoint)


async def delete_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    await api.call("DELETE", path_of(args.endpoint))
    emit(args, {"id": args.endpoint, "deleted": True}, ("id", "deleted"), [[args.endpoint, True]])


async def list_templates(args: argparse.Namespace, api: ApiClient) -> None:
    records = await api.call("GET", "/v1/templates")
    emit(args, records, TEMPLATE_COLUMNS, [template_row(r) for r in records])


async def get_template(args: argparse.Namespace, api: ApiClient) -> None:
    record = await api.call("GET", f"/v1/templates/{quote(args.template, safe='')}")
    emit(args, record, TEMPLATE_COLUMNS, [template_row(record)])
