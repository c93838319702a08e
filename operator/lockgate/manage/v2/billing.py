"""`/v2/billing/serverless`: RunPod's serverless billing history, from the usage lockgate
measures (`store.usage`, written with the history points), per endpoint and time bucket.

RunPod's record (`startTime`, `endTime`, `serverlessId`, `totalAmount`, `gpuAmount`,
`cpuAmount`, `diskAmount`, `feeAmount`) plus lockgate's: `workerSeconds`, `gpuSeconds`,
`gpuSecondsByType` and `vcpuSeconds`. Amounts come from the prices in the settings
(`settings.Prices`); without them they are 0. docs/usage.md says how usage is measured.

lockgate's `groupBy=apiKey` (RunPod has no such parameter) answers per API key instead:
the execution time of each key's jobs, its GPU- and vCPU-seconds at their endpoints' rates
and their amounts, per bucket (`apiKeyId` null: jobs submitted without a key).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import AwareDatetime, Field

from lockgate.gateway.errors import BadRequest, Unavailable, Unprocessable
from lockgate.gateway.http import json_response
from lockgate.manage.usage import (
    Amounts,
    BadWindow,
    BucketSize,
    KeyRecord,
    Record,
    Usage,
    amounts,
    fold,
    fold_keys,
    key_amounts,
    pools_folded,
    window,
)
from lockgate.manage.v2 import Backends, v2_app
from lockgate.manage.v2.bodies import ClosedBody
from lockgate.manage.v2.documented import Operation, documented
from lockgate.manage.v2.problems import validated
from lockgate.models.batch import batch_pool_id, batch_pool_parent
from lockgate.settings import Prices
from lockgate.store.keys import ENDPOINT_ID_RE
from lockgate.store.usage import NO_KEY, KeyUsage, UsageLedger

MONEY_DIGITS = 6  # amounts are rounded to a millionth of the prices' currency unit


@dataclass(frozen=True)
class Billing:
    """Where `/v2/billing` reads usage, what it charges, and the time."""

    ledger: UsageLedger
    prices: Prices = field(default_factory=Prices)
    clock: Callable[[], float] = time.time


BILLING = web.AppKey("billing", Billing)


class GroupBy(enum.StrEnum):
    """lockgate's `groupBy`: records per endpoint (RunPod's) or per API key."""

    ENDPOINT = "endpoint"
    API_KEY = "apiKey"


class BillingQuery(ClosedBody):
    """RunPod's query of `GET /v2/billing/serverless` (each parameter at most once), and
    lockgate's `groupBy`."""

    startTime: AwareDatetime | None = None
    endTime: AwareDatetime | None = None
    bucketSize: BucketSize = BucketSize.DAY
    lastN: int | None = Field(None, ge=1)
    serverlessId: str | None = Field(None, pattern=ENDPOINT_ID_RE.pattern)
    groupBy: GroupBy = GroupBy.ENDPOINT


def query_of(request: web.Request) -> BillingQuery:
    """The request's query as a `BillingQuery`: 422 naming a repeated, unknown or malformed
    parameter, 400 for `lastN` beside `startTime` or `endTime`."""
    repeated = sorted({k for k in request.query if len(request.query.getall(k)) > 1})
    if repeated:
        found = [f"{k}: given more than once" for k in repeated]
        raise Unprocessable("Request validation failed: " + "; ".join(found), errors=found)
    query = validated(BillingQuery, dict(request.query))
    if query.lastN is not None and (query.startTime or query.endTime):
        given = " and ".join(k for k in ("startTime", "endTime") if getattr(query, k))
        raise BadRequest(f"lastN cannot be combined with {given}: give one or the other")
    return query


def _time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _money(a: Amounts) -> dict[str, float]:
    fields = {"totalAmount": a.total, "gpuAmount": a.gpu, "cpuAmount": a.cpu}
    fields |= {"diskAmount": a.disk, "feeAmount": a.fee}
    return {k: round(v, MONEY_DIGITS) for k, v in fields.items()}


def _seconds(u: Usage) -> dict[str, Any]:
    return {
        "workerSeconds": u.worker_seconds,
        "gpuSeconds": sum(u.gpu_seconds.values()),
        "gpuSecondsByType": dict(sorted(u.gpu_seconds.items())),
        "vcpuSeconds": u.vcpu_seconds,
    }


@dataclass(frozen=True)
class _Grouping:
    """How one grouping's records read: the id field of a record and of the count in the
    metadata, and how a record's usage is priced and shown in seconds."""

    id_field: str
    count_field: str
    id_of: Callable[[Any], str | None]
    priced: Callable[[Any, Prices], Amounts]
    seconds: Callable[[Any], dict[str, Any]]
    empty: Callable[[], Any]  # a usage to sum into


def _key_seconds(u: KeyUsage) -> dict[str, Any]:
    return {
        "executionSeconds": u.execution_ms / 1000,
        "gpuSeconds": sum(u.gpu_ms.values()) / 1000,
        "gpuSecondsByType": {t: ms / 1000 for t, ms in sorted(u.gpu_ms.items())},
        "vcpuSeconds": u.vcpu_ms / 1000,
    }


BY_ENDPOINT = _Grouping(
    "serverlessId", "uniqueServerlessCount", lambda r: r.endpoint_id, amounts, _seconds, Usage
)
BY_KEY = _Grouping(
    "apiKeyId", "uniqueApiKeyCount", lambda r: None if r.key_id == NO_KEY else r.key_id,
    key_amounts, _key_seconds, KeyUsage,
)  # fmt: skip


def _report(
    grouping: _Grouping, records: Sequence[Record] | Sequence[KeyRecord], prices: Prices,
    resolved: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The records and the metadata (the resolved query, counts, totals) of one grouping."""
    out, total_money, total_use = [], Amounts(), grouping.empty()
    for r in records:
        money = grouping.priced(r.usage, prices)
        total_money += money
        total_use.add(r.usage)
        out.append(
            {"startTime": _time(r.start), "endTime": _time(r.end)}
            | {grouping.id_field: grouping.id_of(r)}
            | _money(money)
            | grouping.seconds(r.usage)
        )
    metadata = {
        "query": resolved,
        "recordCount": len(out),
        grouping.count_field: len({grouping.id_of(r) for r in records}),
        "totals": _money(total_money) | grouping.seconds(total_use),
    }
    return {"records": out, "metadata": metadata}


def _resolved(query: BillingQuery, first: datetime, last: datetime) -> dict[str, Any]:
    resolved: dict[str, Any] = {"startTime": _time(first), "endTime": _time(last)}
    return resolved | {
        "bucketSize": query.bucketSize, "lastN": query.lastN, "serverlessId": query.serverlessId
    }  # fmt: skip


def report(
    records: list[Record], prices: Prices, query: BillingQuery, first: datetime, last: datetime
) -> dict[str, Any]:
    """RunPod's answer: the records and the metadata (resolved query, counts, totals)."""
    return _report(BY_ENDPOINT, records, prices, _resolved(query, first, last))


def key_report(
    records: list[KeyRecord], prices: Prices, query: BillingQuery, first: datetime, last: datetime
) -> dict[str, Any]:
    """The answer of `groupBy=apiKey`: one record per API key and bucket (`apiKeyId`, null
    for no key), the metadata as RunPod's with the key count and `groupBy`."""
    resolved = _resolved(query, first, last) | {"groupBy": query.groupBy}
    return _report(BY_KEY, records, prices, resolved)


BILLING_OPERATION = Operation(
    "listServerlessBilling",
    "Worker-, GPU- and vCPU-seconds (and amounts, with prices set) per endpoint and bucket",
    errors=(400, 422),
)


@documented(BILLING_OPERATION)
async def serverless_billing(request: web.Request) -> web.Response:
    billing = request.app[BILLING]
    query = query_of(request)
    now = datetime.fromtimestamp(billing.clock(), UTC)
    try:
        first, last = window(
            query.bucketSize, now, start=query.startTime, end=query.endTime, last_n=query.lastN
        )
    except BadWindow as err:
        raise BadRequest(str(err)) from err
    start_s, end_s = int(first.timestamp()), int(last.timestamp())
    if query.serverlessId:  # and its hidden batch pool's, folded into it below
        ids = [query.serverlessId, batch_pool_id(query.serverlessId)]
    else:
        ids = await billing.ledger.endpoint_ids(start_s)
    if query.groupBy is GroupBy.API_KEY:
        by_key = await billing.ledger.key_hours(ids, start_s, end_s)
        keyed = fold_keys(by_key, query.bucketSize, first, last)
        return json_response(key_report(keyed, billing.prices, query, first, last))
    hours = await billing.ledger.hours(ids, start_s, end_s)
    asked = query.serverlessId  # asked for by its own id, a pool is shown as such
    hours = pools_folded(hours, lambda i: None if i == asked else batch_pool_parent(i, ids))
    records = fold(hours, query.bucketSize, first, last)
    return json_response(report(records, billing.prices, query, first, last))


@documented(BILLING_OPERATION)
async def unavailable(_request: web.Request) -> web.Response:
    raise Unavailable("usage is not recorded by this process (it runs no history sampler)")


def create_app(backends: Backends) -> web.Application:
    """`GET /v2/billing/serverless` (admin keys)."""
    app = v2_app(backends)
    if backends.billing is None:
        app.router.add_get("/serverless", unavailable)
        return app
    app[BILLING] = backends.billing
    app.router.add_get("/serverless", serverless_billing)
    return app
