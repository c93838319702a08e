"""RunPod's own MCP server, `@runpod/mcp-server` 4.0.0 (`make mcp` installs it, pinned, outside
the repo), driven over stdio by the official `mcp` client from PyPI, pointed at lockgate.

    async with runpod_mcp(binary, api_key=dev.key, origin=dev.url) as mcp:
        done = await mcp.call("runsync-endpoint", {"endpointId": "echo", "input": {"x": 1}})

`call` returns the tool's answer parsed (every tool of 4.0.0 answers one JSON text) and fails
the test with the tool's own error text when the tool reports `isError`; `failure` is for a
call that is meant to fail. The `runpod_mcp_bin` fixture (tests/mcp_fixtures.py) finds the
binary, or skips (fails under LOCKGATE_REQUIRE_MCP=1).

Where it goes: the server reads its hosts from the environment (src/_shared/hosts.ts), so all
four are set to lockgate, and its process gets no other variable than those and the `mcp`
client's short default list (HOME, LOGNAME, PATH, SHELL, TERM, USER): no POSTHOG_API_KEY, so
its analytics (src/specgen/analytics.ts, hosted path only anyway) stay off; its tracking
(src/_shared/tracking.ts) is two headers on the requests it sends to lockgate, nothing sent
elsewhere. docs/mcp.md says how the test traffic was checked to stay on this machine.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import PaginatedRequestParams

VERSION = "4.0.0"
REQUIRE_ENV = "LOCKGATE_REQUIRE_MCP"
TOOLS_DIR = Path(os.environ.get("LOCKGATE_TOOLS_DIR") or Path.home() / ".cache/lockgate-tools")
BINARY = TOOLS_DIR / "mcp-server/node_modules/.bin/runpod-mcp"
# A tool call's bound: runsync-endpoint and get-job-status hold up to their `wait`, stream-job
# polls for up to 5 minutes; a test asks for less and gets its answer well before this.
CALL_TIMEOUT_S = 90.0


def server_env(api_key: str, origin: str, job_origin: str | None = None) -> dict[str, str]:
    """The variables that point RunPod's MCP server at lockgate: the management API (v2, and
    /graphql for the tools v2 does not cover) at `origin`, the job API at `job_origin`
    (default `origin`: `lockgate dev` serves both on one port)."""
    origin = origin.rstrip("/")
    return {
        "RUNPOD_API_KEY": api_key,
        "RUNPOD_API_BASE_URL": origin,
        "RUNPOD_SERVERLESS_API_URL": f"{(job_origin or origin).rstrip('/')}/v2",
        "RUNPOD_PUBLIC_GRAPHQL_URL": f"{origin}/graphql",
        "RUNPOD_AUTHED_GRAPHQL_URL": f"{origin}/graphql",
    }


def find_binary() -> Path:
    """`runpod-mcp` from `make mcp`; without it the test skips, or fails under
    LOCKGATE_REQUIRE_MCP=1."""
    if os.access(BINARY, os.X_OK):
        return BINARY
    message = f"RunPod's MCP server is not installed at {BINARY} (make mcp; needs node >= 20)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


class ToolFailed(AssertionError):
    """A tool answered `isError`: its own error text is the message."""


@dataclass
class McpServer:
    """One running `runpod-mcp`, its initialized session, and its stderr (one `tool_call`
    line per call), kept for failure messages."""

    session: ClientSession
    stderr: Any

    async def tool_names(self) -> list[str]:
        """The names tools/list answers, in the server's order (every page)."""
        names: list[str] = []
        params = None
        while True:
            page = await self.session.list_tools(params=params)
            names += [tool.name for tool in page.tools]
            if page.next_cursor is None:
                return names
            params = PaginatedRequestParams(cursor=page.next_cursor)

    async def _answer(self, tool: str, arguments: dict[str, Any] | None) -> tuple[bool, Any]:
        result = await self.session.call_tool(tool, arguments or {}, CALL_TIMEOUT_S)
        text = "".join(getattr(part, "text", "") for part in result.content)
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return bool(result.is_error), payload

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """The tool's answer, parsed; a ToolFailed with its error text when it reports one."""
        failed, payload = await self._answer(tool, arguments)
        if failed:
            error = json.dumps(payload, ensure_ascii=False)
            raise ToolFailed(f"{tool} {json.dumps(arguments)} failed: {error}{self._log()}")
        return payload

    async def failure(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """The error the tool reports (parsed); a ToolFailed when it succeeds instead."""
        failed, payload = await self._answer(tool, arguments)
        if not failed:
            answer = json.dumps(payload, ensure_ascii=False)
            raise ToolFailed(f"{tool} {json.dumps(arguments)} was meant to fail: {answer}")
        return payload

    def _log(self) -> str:
        self.stderr.seek(0)
        tail = self.stderr.read()[-2000:]
        return f"\nrunpod-mcp's stderr (end):\n{tail}" if tail else ""


@asynccontextmanager
async def runpod_mcp(
    binary: Path, *, api_key: str, origin: str, job_origin: str | None = None
) -> AsyncIterator[McpServer]:
    """`runpod-mcp` started over stdio against lockgate (see `server_env`), initialized; it is
    stopped when the block ends."""
    params = StdioServerParameters(command=str(binary), env=server_env(api_key, origin, job_origin))
    with tempfile.TemporaryFile("w+") as stderr:
        async with (
            stdio_client(params, errlog=stderr) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield McpServer(session, stderr)
