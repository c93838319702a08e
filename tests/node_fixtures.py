"""Fixtures for the tests on a real node: the node itself, once per test module.

Test modules load this with `pytest_plugins = ["node_fixtures"]` (and never import it; the
helpers are in node_release). Without the harness (root, containerd, the node binaries of
`make envtest`, the images of `make cluster-images`, helm of `make tools`) the tests skip,
unless LOCKGATE_REQUIRE_CLUSTER=1 (CI) makes that a failure.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import Cluster
from node_release import Release, require_cluster


@pytest.fixture(scope="module")
def node() -> Iterator[Cluster]:
    """A real one-node cluster with the images imported (~30-45 s to Ready), per module:
    stopped when the module's tests are done, so its processes (~0.9 GB, a busy kubelet)
    do not load the rest of the suite on a 2-core machine."""
    require_cluster()
    cluster = Cluster()
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def release(node: Cluster) -> Iterator[Release]:
    """The chart installed by real helm with tests/node-values.yaml, uninstalled after the
    module (a module that installs otherwise defines its own `release`)."""
    rel = Release(node)
    rel.install()
    yield rel
    rel.uninstall()
