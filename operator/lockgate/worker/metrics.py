"""The worker's own Prometheus metrics, served when `LOCKGATE_WORKER_METRICS_PORT` is set.

    lockgate_worker_batch_size            histogram  jobs in each batch handed to the handler
    lockgate_worker_batch_wait_seconds    histogram  the first job's wait for its batch

Only a worker with `batch` records them. They need prometheus_client (`pip install
prometheus-client`; the worker runtime itself needs only httptools): without it, or without
the port, the worker serves no metrics and says so once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .logs import log

PORT_VAR = "LOCKGATE_WORKER_METRICS_PORT"
BATCH_SIZE = "lockgate_worker_batch_size"
BATCH_WAIT = "lockgate_worker_batch_wait_seconds"
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BatchMetrics:
    """The batch histograms, on a registry of their own, served on `port` once started."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry()
        self._size = Histogram(
            BATCH_SIZE, "Jobs in each batch handed to the handler", registry=self.registry,
            buckets=SIZE_BUCKETS,
        )  # fmt: skip
        self._wait = Histogram(
            BATCH_WAIT, "Seconds the first job of a batch waited for it to fill",
            registry=self.registry, buckets=WAIT_BUCKETS,
        )  # fmt: skip

    def observe(self, size: int, waited_s: float) -> None:
        """Record one batch handed to the handler."""
        self._size.observe(size)
        self._wait.observe(waited_s)

    def serve(self, port: int) -> None:
        """Serve the metrics at `http://0.0.0.0:{port}/metrics` (a daemon thread)."""
        from prometheus_client import start_http_server

        start_http_server(port, registry=self.registry)


def batch_metrics(env: Mapping[str, str] = os.environ) -> BatchMetrics | None:
    """The batch metrics, served on `LOCKGATE_WORKER_METRICS_PORT`; None when not asked for
    or not possible (logged)."""
    raw = env.get(PORT_VAR)
    if not raw:
        return None
    port = _port(raw)
    if port is None:
        log.warning("%s=%r is not a port number; no metrics served", PORT_VAR, raw)
        return None
    try:
        metrics = BatchMetrics()
        metrics.serve(port)
    except ImportError:
        log.warning("%s is set but prometheus_client is not installed; no metrics", PORT_VAR)
        return None
    except OSError as err:
        log.warning("cannot serve metrics on port %d: %s", port, err)
        return None
    log.info("batch metrics at http://0.0.0.0:%d/metrics", port)
    return metrics


def _port(raw: Any) -> int | None:
    try:
        port = int(raw)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None
