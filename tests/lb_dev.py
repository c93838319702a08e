"""`lockgate dev --endpoint-type LB` with the FastAPI example worker, as the LB test
modules start it (one helper, so they start it the same way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.devproc import REPO, DevProcess

WORKER = f"python {REPO / 'examples' / 'loadbalancer' / 'worker.py'}"


@contextmanager
def lb_dev(
    data_dir: Path, endpoint_id: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[DevProcess]:
    """One dev mode with an LB endpoint `endpoint_id` of the example worker, from zero
    workers (idle ones kept 60 s); `args` add dev's flags, `env` its environment."""
    proc = DevProcess(
        "--worker-command", WORKER, "--endpoint-id", endpoint_id, "--endpoint-type", "LB",
        "--idle-timeout", "60", *args, data_dir=data_dir, env=env,
    )  # fmt: skip
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def lb_url(proc: DevProcess, path: str) -> str:
    """`path` on the endpoint's LB route."""
    return f"{proc.url}/lb/{proc.endpoint}/{path}"
