"""RunPod's management rate limits on v2 answers: per caller (its key's name), in a minute,
an hour and a day window, with the IETF ratelimit-headers draft's `RateLimit` (`r` left,
`t` seconds to the window's end) and `RateLimit-Policy` (`q` quota, `w` window seconds) on
every authenticated answer, and a 429 problem with `Retry-After` once a window is spent.

The quotas are RunPod's shape with lockgate's numbers (RunPod publishes none):
`LOCKGATE_MANAGE_RATE_LIMITS`, e.g. `minute=600,hour=20000,day=200000` (the default).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from redis.asyncio import Redis

from lockgate.gateway.auth import CALLER
from lockgate.gateway.errors import ApiError, TooManyRequests
from lockgate.store.manage_rates import count_request

WINDOW_SECONDS = {"minute": 60, "hour": 3600, "day": 86_400}
DEFAULT_QUOTAS = {"minute": 600, "hour": 20_000, "day": 200_000}
QUOTAS_ENV = "LOCKGATE_MANAGE_RATE_LIMITS"


@dataclass(frozen=True)
class Window:
    name: str
    seconds: int
    quota: int


def parse_quotas(text: str) -> tuple[Window, ...]:
    """`minute=600,hour=20000,day=200000` (any of them; the others keep their default)
    as windows; `ValueError` naming what is wrong."""
    quotas = dict(DEFAULT_QUOTAS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name not in WINDOW_SECONDS or not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"{QUOTAS_ENV}: {part!r}: use minute=N, hour=N or day=N with N at least 1"
            )
        quotas[name] = int(value)
    return tuple(Window(n, WINDOW_SECONDS[n], quotas[n]) for n in WINDOW_SECONDS)


def headers_for(windows: Sequence[Window], counts: Sequence[int], now_s: int) -> dict[str, str]:
    """The `RateLimit` and `RateLimit-Policy` headers after `counts` requests."""
    left = [
        f'"{w.name}";r={max(0, w.quota - c)};t={w.seconds - now_s % w.seconds}'
        for w, c in zip(windows, counts, strict=True)
    ]
    policy = [f'"{w.name}";q={w.quota};w={w.seconds}' for w in windows]
    return {"RateLimit": ", ".join(left), "RateLimit-Policy": ", ".join(policy)}


def refusal(windows: Sequence[Window], counts: Sequence[int], now_s: int) -> TooManyRequests | None:
    """The 429 once `counts` overrun a window (`Retry-After`: until the spent window that
    ends last is over), or None."""
    spent = [
        (w, w.seconds - now_s % w.seconds)
        for w, c in zip(windows, counts, strict=True)
        if c > w.quota
    ]
    if not spent:
        return None
    window, wait = max(spent, key=lambda pair: pair[1])
    return TooManyRequests(
        f"rate limit exceeded for the {window.name} window ({window.quota} requests); "
        f"retry in {wait} s",
        headers={"Retry-After": str(wait)},
    )


def rate_limits(redis: Redis, windows: Sequence[Window] | None = None) -> Any:
    """The middleware (after the admin-key check, inside the error middleware) that counts
    each authenticated request and puts the headers on its answer, error or not."""
    windows = windows or parse_quotas(os.environ.get(QUOTAS_ENV, ""))
    spans = [(w.name, w.seconds) for w in windows]

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        now_s = int(time.time())
        counts = await count_request(redis, request.get(CALLER) or "-", spans, now_s)
        headers = headers_for(windows, counts, now_s)
        refused = refusal(windows, counts, now_s)
        if refused is not None:
            refused.headers = {**headers, **(refused.headers or {})}
            raise refused
        try:
            response = await handler(request)
        except ApiError as err:
            err.headers = {**headers, **(err.headers or {})}
            raise
        except web.HTTPException as err:
            err.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    return middleware
