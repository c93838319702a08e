"""`lockgate endpoints list|get|create|edit|delete` and `lockgate templates list|get`, over
the management API (`/v1/endpoints`, `/v1/templates`; admin keys)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lockgate.client import ApiClient, ClientError
from lockgate.commands.session import emit

ENDPOINT_COLUMNS = ("id", "name", "type", "phase", "workers", "ready", "queued", "job api")
TEMPLATE_COLUMNS = ("id", "name", "image", "category", "serverless")
# The named flags of `create` and `edit`, and the field each one sets.
FLAG_FIELDS = {
    "name": "name",
    "template_id": "templateId",
    "workers_min": "workersMin",
    "workers_max": "workersMax",
    "idle_timeout": "idleTimeout",
    "execution_timeout_ms": "executionTimeoutMs",
    "type": "type",
    "scaler_type": "scalerType",
    "scaler_value": "scalerValue",
    "request_timeout_s": "requestTimeoutS",
    "lb_hold_s": "lbHoldS",
}


def endpoint_row(record: dict[str, Any]) -> list[Any]:
    """One endpoint as a table row."""
    status = record.get("status") or {}
    workers = status.get("workers") or {}
    return [
        record.get("id"),
        record.get("name"),
        record.get("type"),
        status.get("phase"),
        f"{record.get('workersMin', 0)}-{record.get('workersMax', 0)}",
        workers.get("ready", 0),
        (status.get("jobs") or {}).get("inQueue", 0),
        record.get("jobApiUrl"),
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


def payload(args: argparse.Namespace) -> dict[str, Any]:
    """The fields `create` or `edit` sends: `-f FILE`, then `--set FIELD=VALUE`, then the
    named flags, each over the one before."""
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
            raise ClientError(f"--set {item!r}: write FIELD=VALUE, e.g. --set workersMax=5")
        body[field] = value_of(text)
    for flag, field in FLAG_FIELDS.items():
        if (value := getattr(args, flag, None)) is not None:
            body[field] = value
    return body


def path_of(endpoint_id: str) -> str:
    return f"/v1/endpoints/{quote(endpoint_id, safe='')}"


async def list_endpoints(args: argparse.Namespace, api: ApiClient) -> None:
    records = await api.call("GET", "/v1/endpoints")
    emit(args, records, ENDPOINT_COLUMNS, [endpoint_row(r) for r in records])


async def get_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    record = await api.call("GET", path_of(args.endpoint))
    emit(args, record, ENDPOINT_COLUMNS, [endpoint_row(record)])


async def create_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    body = payload(args)
    if args.id:
        body["id"] = args.id
    if not body.get("templateId"):
        raise ClientError(
            "give --template-id (a template's id; in dev mode a handler file or command)"
        )
    record = await api.call("POST", "/v1/endpoints", body=body)
    emit(args, record, ENDPOINT_COLUMNS, [endpoint_row(record)])


async def edit_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    body = payload(args)
    if not body:
        raise ClientError("nothing to change: give --set FIELD=VALUE, a named flag or -f FILE")
    record = await api.call("PATCH", path_of(args.endpoint), body=body)
    emit(args, record, ENDPOINT_COLUMNS, [endpoint_row(record)])


async def delete_endpoint(args: argparse.Namespace, api: ApiClient) -> None:
    await api.call("DELETE", path_of(args.endpoint))
    emit(args, {"id": args.endpoint, "deleted": True}, ("id", "deleted"), [[args.endpoint, True]])


async def list_templates(args: argparse.Namespace, api: ApiClient) -> None:
    records = await api.call("GET", "/v1/templates")
    emit(args, records, TEMPLATE_COLUMNS, [template_row(r) for r in records])


async def get_template(args: argparse.Namespace, api: ApiClient) -> None:
    record = await api.call("GET", f"/v1/templates/{quote(args.template, safe='')}")
    emit(args, record, TEMPLATE_COLUMNS, [template_row(record)])
