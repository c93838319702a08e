"""Load-balancing endpoints' warm-up: a new worker whose health path first answers 200 is
sent the endpoint's warm-up request (models/warmup.py) before it is routable.

Every gateway process polls every worker, but only one sends the request: the one that
claims it in Redis (`LbWorkers.claim_warmup`, `lbu`). The others keep the worker
initializing until the outcome is there. A claim outlives its process by no more than the
request's time limit (the endpoint's `requestTimeoutS`) plus `CLAIM_GRACE_MS`: then
another process sends it again. A non-2xx answer, no answer or a timeout marks the worker
unhealthy for good (`JobStore.mark_unhealthy`): it is never routable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
import orjson

from lockgate.gateway.endpoints import EndpointCache
from lockgate.gateway.errors import NotFound
from lockgate.models.unhealthy import REASON_CHARS, UnhealthyWorker
from lockgate.models.warmup import WarmupRequest
from lockgate.store import JobStore
from lockgate.store.lb_workers import (
    FAILED,
    HEALTHY,
    INITIALIZING,
    UNHEALTHY,
    WARMED,
    LbWorkers,
)

log = logging.getLogger("lockgate.gateway")

CLAIM_GRACE_MS = 5_000  # a claim lasts the request's time limit and this much (ms)
ANSWER_READ_MAX = 64 * 1024  # of a warm-up answer's body, read and dropped


class LbWarmer:
    """Sends new workers their endpoint's warm-up request; says whether each is ready."""

    def __init__(
        self,
        workers: LbWorkers,
        jobs: JobStore,
        endpoints: EndpointCache,
        *,
        clock_ms: Callable[[], int],
    ) -> None:
        self.workers = workers
        self.jobs = jobs
        self.endpoints = endpoints
        self.clock_ms = clock_ms
        self._http: aiohttp.ClientSession | None = None

    async def ready(self, endpoint_id: str, worker_id: str, address: str) -> str:
        """A worker whose health path answered 200: HEALTHY when the endpoint has no
        warm-up or the worker's succeeded (sent here now, if this process claims it),
        UNHEALTHY when it failed, else INITIALIZING (another process sends it)."""
        try:
            entry = await self.endpoints.get(endpoint_id)
        except NotFound:
            return HEALTHY
        request = entry.warmup.request if entry.warmup is not None else None
        if request is None:
            return HEALTHY
        state = await self.workers.warmup_state(endpoint_id, worker_id)
        if state == WARMED:
            return HEALTHY
        if state is not None and state.startswith(FAILED):
            return UNHEALTHY
        now = self.clock_ms()
        until = now + entry.requestTimeoutS * 1000 + CLAIM_GRACE_MS
        if not await self.workers.claim_warmup(endpoint_id, worker_id, now_ms=now, until_ms=until):
            return INITIALIZING
        failure = await self.send(address, request, float(entry.requestTimeoutS))
        await self.workers.warmup_ended(endpoint_id, worker_id, failure)
        if failure is None:
            return HEALTHY
        log.warning("endpoint %s: worker %s unhealthy: %s", endpoint_id, worker_id, failure)
        why = UnhealthyWorker(
            worker=worker_id, kind="warmup", reason=failure[:REASON_CHARS], at=self.clock_ms()
        )
        await self.jobs.mark_unhealthy(endpoint_id, why)
        return UNHEALTHY

    async def send(self, address: str, request: WarmupRequest, timeout_s: float) -> str | None:
        """Send the warm-up request to the worker's HTTP server (`address`, host:port);
        None when it answered 2xx, else why not."""
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        said = f"the warm-up request {request.method} {request.path}"
        headers = dict(request.headers)
        data = None
        if request.body is not None:
            data = orjson.dumps(request.body)
            if not any(h.lower() == "content-type" for h in headers):
                headers["Content-Type"] = "application/json"
        try:
            async with self._http.request(
                request.method, f"http://{address}{request.path}", headers=headers, data=data,
                timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False,
            ) as answer:  # fmt: skip
                await answer.content.read(ANSWER_READ_MAX)
                if 200 <= answer.status < 300:
                    return None
                return f"{said} was answered {answer.status}"
        except TimeoutError:
            return f"{said} had no answer within {timeout_s:g} s (requestTimeoutS)"
        except (aiohttp.ClientError, OSError) as err:
            return f"{said} failed: {err!r}"

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
