"""Fixtures for the tests that drive RunPod's MCP server (helpers: tests/mcp_server.py).
Test modules load this with `pytest_plugins = ["mcp_fixtures"]`.

Without the server (`make mcp`: npm's @runpod/mcp-server 4.0.0, node >= 20) the tests skip,
unless LOCKGATE_REQUIRE_MCP=1 (CI) makes that a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp_server import find_binary


@pytest.fixture(scope="session")
def runpod_mcp_bin() -> Path:
    """The `runpod-mcp` binary of `make mcp`."""
    return find_binary()
