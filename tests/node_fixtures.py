"""Fixtures for the tests on a real node: one node for every node test of the run.

Test modules load this with `pytest_plugins = ["node_fixtures"]` (and never import it; the
helpers are in node_release). Without the harness (root, containerd, the node binaries of
`make envtest`, the images of `make cluster-images`, helm of `make tools`) the tests skip,
unless LOCKGATE_REQUIRE_CLUSTER=1 (CI) makes that a failure.

The node starts at the first node test and stops at the end of the run; tests/conftest.py
groups the node tests so that under pytest-xdist they all run on one worker, first, while
the other worker runs the rest of the suite. After each module, `reset_node` takes away
what the module left (releases, lockgate objects and CRDs, namespaces), so the next one
starts as on a fresh node without paying for one (~45 s a module).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import Cluster
from node_release import Release, require_cluster, reset_node


@pytest.fixture(scope="session")
def shared_node() -> Iterator[Cluster]:
    """The real one-node cluster with the images imported (~30-45 s to Ready)."""
    require_cluster()
    cluster = Cluster()
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def node(shared_node: Cluster) -> Iterator[Cluster]:
    """The node, as fresh for this module: cleared of what the module left after it."""
    yield shared_node
    reset_node(shared_node)


@pytest.fixture(scope="module")
def release(node: Cluster) -> Iterator[Release]:
    """The chart installed by real helm with tests/node-values.yaml, uninstalled after the
    module (a module that installs otherwise defines its own `release`)."""
    rel = Release(node)
    rel.install()
    yield rel
    rel.uninstall()
