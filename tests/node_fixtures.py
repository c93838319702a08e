"""Fixtures for the tests on a real node: the node itself, once per session.

Test modules load this with `pytest_plugins = ["node_fixtures"]` (and never import it; the
helpers are in node_release). Without the harness (root, containerd, the node binaries of
`make envtest`, the images of `make cluster-images`, helm of `make tools`) the tests skip,
unless LOCKGATE_REQUIRE_CLUSTER=1 (CI) makes that a failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import Cluster
from node_release import require_cluster


@pytest.fixture(scope="session")
def node() -> Iterator[Cluster]:
    """A real one-node cluster with the images imported (~30 s to Ready)."""
    require_cluster()
    cluster = Cluster()
    cluster.start()
    yield cluster
    cluster.stop()
