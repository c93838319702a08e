"""`POST /v1/hooks/git/{endpoint}`: a git server's push webhook starting a build of the
endpoint's source by its `trigger` (`manage.githooks` decides; docs/builds.md).

No API key: the hook proves itself with the endpoint's webhook secret (made and shown once
by `POST /v2/serverless/{id}/builds/webhook`), and is refused 401 without that proof. It is
mounted on the root application, beside the `/v1` sub-application (whose routes all need
an admin key): aiohttp resolves the longer prefix first. Answers are v1's JSON,
`{"error": …}` for a refusal.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from lockgate.manage import githooks
from lockgate.manage.controlplane import (
    BuildsUnavailable,
    ControlPlane,
    EndpointNotFound,
    NoSource,
)
from lockgate.models.source import EndpointSource, source_of
from lockgate.store.builds import HookSecrets
from lockgate.store.keys import ENDPOINT_ID_RE

BODY_MAX = 5 * 1024 * 1024  # bytes of a hook's payload (GitHub caps its own at 25 MB)
HOOK_PLANE = web.AppKey("git_hook_plane", ControlPlane)
HOOK_SECRETS = web.AppKey("git_hook_secrets", HookSecrets)
PATH = "/v1/hooks/git/{endpoint}"


class Refusal(Exception):
    """A hook refused: its status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _body(request: web.Request) -> bytes:
    """The payload; 413 past BODY_MAX."""
    too_big = Refusal(413, f"body: at most {BODY_MAX} bytes")
    if request.content_length is not None and request.content_length > BODY_MAX:
        raise too_big
    body = await request.content.read(BODY_MAX + 1)
    if len(body) > BODY_MAX:
        raise too_big
    return body


async def _verified(request: web.Request, endpoint_id: str) -> tuple[githooks.Server, bytes]:
    """The sending server and the payload, once its signature is the endpoint's secret's
    (401 otherwise, an unknown endpoint included: it has no secret)."""
    if not ENDPOINT_ID_RE.fullmatch(endpoint_id):
        raise Refusal(404, f"endpoint {endpoint_id!r} not found")
    try:
        server = githooks.server_of(request.headers)
    except githooks.NotAHook as err:
        raise Refusal(400, str(err)) from err
    body = await _body(request)
    secret = await request.app[HOOK_SECRETS].get(endpoint_id)
    if secret is None or not githooks.verified(server, request.headers, body, secret):
        raise Refusal(401, "signature: missing or not made with this endpoint's webhook secret")
    return server, body


async def _source(plane: ControlPlane, endpoint_id: str) -> EndpointSource:
    try:
        source = source_of((await plane.get(endpoint_id)).source)
    except EndpointNotFound as err:
        raise Refusal(404, f"endpoint {endpoint_id!r} not found") from err
    if source is None:
        raise Refusal(409, f"endpoint {endpoint_id!r} has no source to build")
    return source


async def git_hook(request: web.Request) -> web.Response:
    """Verify, then build when the event fits the trigger: 202 with the build, 200 when the
    event builds nothing (and why)."""
    endpoint_id = request.match_info["endpoint"]
    plane = request.app[HOOK_PLANE]
    try:
        server, body = await _verified(request, endpoint_id)
        source = await _source(plane, endpoint_id)
        try:
            payload = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as err:
            raise Refusal(400, "body: expected the server's JSON payload") from err
        event = githooks.event_of(server, request.headers, payload)
        decision = githooks.decide(source.git.trigger, source.git.ref, event)
        answer = {"build": None, "event": event.kind.value, "why": decision.why}
        if decision.ref is None or decision.reason is None:
            return web.json_response(answer)
        try:
            build = await plane.start_build(endpoint_id, decision.ref, decision.reason)
        except NoSource as err:
            raise Refusal(409, str(err)) from err
        except BuildsUnavailable as err:
            raise Refusal(501, str(err)) from err
    except Refusal as err:
        return web.json_response({"error": str(err)}, status=err.status)
    return web.json_response({**answer, "build": build.view()}, status=202)


def add_git_hook_route(root: web.Application, plane: ControlPlane, secrets: HookSecrets) -> None:
    """Mount the hook on the root application (no API key: its signature is checked)."""
    root[HOOK_PLANE] = plane
    root[HOOK_SECRETS] = secrets
    root.router.add_post(PATH, git_hook)
