"""A `tests.json` test of a load-balancing endpoint: one HTTP request through the gateway's
load-balancing route (`/lb/{endpoint}/{path}`, `gateway.lb_proxy`), as a client sends it.

The test's `input` is the request's JSON body (none for GET), sent with its `method` to
its `path` (`models.hub.HubTest`); the route holds it until a worker of the endpoint is
ready, then proxies it. It passes when the answer is HTTP 200 within the test's `timeout`
(`models.verdicts.http_result`); out of time, the request is cancelled. The client of both
modes' canaries (`dev.canary`, `kube.canary`: docs/builds.md, "Tested before it takes
traffic")."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from lockgate.models.hub import HubTest
from lockgate.models.verdicts import DETAIL_CHARS, CaseResult, http_result, unanswered

# The request's own time is the test's (`asyncio.timeout`), not the session's.
NO_SESSION_TIMEOUT = aiohttp.ClientTimeout(total=None)


async def run_lb_test(
    session: aiohttp.ClientSession, lb_url: str, headers: dict[str, str], test: HubTest
) -> CaseResult:
    """One test sent to `lb_url` (`…/lb/{endpoint}`) with `headers` (the key)."""
    started = time.monotonic()
    url = lb_url.rstrip("/") + test.path
    body = None if test.method == "GET" else test.input
    try:
        async with asyncio.timeout(test.timeout_s):
            async with session.request(
                test.method, url, json=body, headers=headers, timeout=NO_SESSION_TIMEOUT
            ) as answer:
                start = b"" if answer.status == 200 else await answer.content.read(DETAIL_CHARS)
                return http_result(test, answer.status, start, time.monotonic() - started)
    except TimeoutError:
        return unanswered(test, time.monotonic() - started)
    except aiohttp.ClientError as err:
        return unanswered(test, time.monotonic() - started, f"{type(err).__name__}: {err}")
