"""`lockgate dev` with GPU prices set and endpoints made through the management API: the
usage and billing tests' server (tests/test_usage_per_key.py, tests/test_console_usage.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from console_browser import create_endpoint
from devproc import DevProcess

HANDLER = "examples/echo/handler.py"


@contextlib.contextmanager
def priced_dev(
    data_dir: Path, prices: dict[str, float], endpoints: dict[str, dict[str, Any]]
) -> Iterator[DevProcess]:
    """`lockgate dev` (the echo handler) with `prices` per GPU type and hour
    (`LOCKGATE_GPU_PRICES`) and `endpoints` (id -> spec, the echo handler as template)."""
    env = {"LOCKGATE_GPU_PRICES": json.dumps(prices)}
    dev = DevProcess(HANDLER, data_dir=data_dir, env=env).start()
    try:
        for endpoint_id, spec in endpoints.items():
            create_endpoint(dev, endpoint_id, templateId=HANDLER, **spec)
        yield dev
    finally:
        dev.stop()
