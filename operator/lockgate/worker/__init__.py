"""lockgate's worker runtime: run a RunPod-style handler against a lockgate gateway.

It needs only httptools (an HTTP parser), so it fits in any worker image. A handler takes
the job dict (`job["input"]` is the request's input) and returns the output; it may be a
function, an async function, a generator or an async generator (generators stream)::

    import lockgate.worker

    def handler(job):
        return {"echo": job["input"]}

    lockgate.worker.start({"handler": handler})

Fitness checks (as `runpod.serverless.register_fitness_check`) run once before the first
job; one that raises reports the worker unhealthy and exits it with code 1::

    @lockgate.worker.register_fitness_check
    def check_weights():
        if not os.path.exists("/models/model.safetensors"):
            raise RuntimeError("model file not found")

Dynamic batching: `start({"handler": embed, "batch": {"max_size": 32, "wait_ms": 10}})`
calls `embed(jobs)` with a list of jobs and takes a list of outputs back; `batched(embed,
max_size=32)` does the same under the runpod SDK (`batching`).

`python handler.py --test_input '{"input": {"x": 1}}'` runs one job locally and prints
the result. Deployed, the worker reads `LOCKGATE_GATEWAY_URL`, `LOCKGATE_ENDPOINT_ID`,
`LOCKGATE_WORKER_ID` and `LOCKGATE_WORKER_KEY` (or the `RUNPOD_*` variables RunPod sets).
"""

from __future__ import annotations

from collections.abc import Mapping

from lockgate.signing import WebhookVerificationError, verify

from .batching import batched
from .entry import start
from .fitness import register_fitness_check

__all__ = [
    "WebhookVerificationError",
    "batched",
    "register_fitness_check",
    "start",
    "verify_webhook",
]


def verify_webhook(
    headers: Mapping[str, str], body: bytes, secret: str, *, tolerance_s: int = 300
) -> None:
    """Check a lockgate webhook call's Standard Webhooks signature.

    Raise `WebhookVerificationError` unless one signature matches and the timestamp is
    within `tolerance_s` seconds of now.
    """
    verify(secret, headers, body, tolerance_s=tolerance_s)
