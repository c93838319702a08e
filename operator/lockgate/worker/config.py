"""Worker settings from the environment: `LOCKGATE_*` first, then RunPod's variables."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PING_INTERVAL_MS = 10_000  # RunPod's default heartbeat period
# Jobs lockgate's runtime may take beyond its concurrency while its jobs are short
# (worker/runtime.py `Runtime._ahead`); LOCKGATE_TAKE_AHEAD=0 turns it off.
DEFAULT_TAKE_AHEAD = 3
TAKE_AHEAD_MAX = 32


class ConfigError(Exception):
    """The environment names a gateway but not enough to reach it."""


@dataclass(frozen=True)
class WorkerConfig:
    """Where the gateway's worker API lives and who this worker is.

    `done_url`, `stream_url` and `return_url` hold `$ID` where the job id goes (RunPod's
    template form). `return_url` (lockgate's gateway only: RunPod has no such route) and
    `take_ahead` are empty and 0 with RunPod's variables alone: no job is taken ahead.
    """

    worker_id: str
    worker_key: str
    endpoint_id: str
    take_url: str
    take_batch_url: str
    done_url: str
    stream_url: str
    ping_url: str
    stop_url: str
    ping_interval_s: float
    log_level: str
    return_url: str = ""
    take_ahead: int = 0


def gateway_configured(env: Mapping[str, str] = os.environ) -> bool:
    """Return whether the environment points this worker at a gateway."""
    return bool(env.get("LOCKGATE_GATEWAY_URL") or env.get("RUNPOD_WEBHOOK_GET_JOB"))


def load(env: Mapping[str, str] = os.environ) -> WorkerConfig:
    """Read the worker's settings; raise `ConfigError` if no gateway can be located."""
    worker_id = env.get("LOCKGATE_WORKER_ID") or env.get("RUNPOD_POD_ID") or uuid.uuid4().hex[:12]
    endpoint_id = env.get("LOCKGATE_ENDPOINT_ID") or env.get("RUNPOD_ENDPOINT_ID") or ""
    urls = _lockgate_urls(env, endpoint_id, worker_id) or _runpod_urls(env, worker_id)
    return WorkerConfig(
        worker_id=worker_id,
        worker_key=env.get("LOCKGATE_WORKER_KEY") or env.get("RUNPOD_AI_API_KEY") or "",
        endpoint_id=endpoint_id,
        ping_interval_s=_ping_interval_ms(env) / 1000,
        log_level=log_level(env),
        **urls,
        take_ahead=_take_ahead(env) if "return_url" in urls else 0,
    )


def log_level(env: Mapping[str, str] = os.environ) -> str:
    """Return the configured log level name (default INFO)."""
    return (env.get("LOCKGATE_LOG_LEVEL") or "INFO").upper()


def _lockgate_urls(env: Mapping[str, str], endpoint_id: str, worker_id: str) -> dict[str, str]:
    gateway = (env.get("LOCKGATE_GATEWAY_URL") or "").rstrip("/")
    if not gateway:
        return {}
    if not endpoint_id:
        raise ConfigError("LOCKGATE_GATEWAY_URL is set but LOCKGATE_ENDPOINT_ID is not")
    base = f"{gateway}/v2/{endpoint_id}"
    return {
        "take_url": f"{base}/job-take/{worker_id}",
        "take_batch_url": f"{base}/job-take-batch/{worker_id}",
        "done_url": f"{base}/job-done/{worker_id}/$ID",
        "stream_url": f"{base}/job-stream/{worker_id}/$ID",
        "ping_url": f"{base}/ping/{worker_id}",
        "stop_url": f"{base}/job-stop/{worker_id}",
        "return_url": f"{base}/job-return/{worker_id}/$ID",
    }


def _runpod_urls(env: Mapping[str, str], worker_id: str) -> dict[str, str]:
    take = env.get("RUNPOD_WEBHOOK_GET_JOB", "").replace("$ID", worker_id)
    if "/job-take/" not in take:
        raise ConfigError("set LOCKGATE_GATEWAY_URL, or RUNPOD_WEBHOOK_GET_JOB to a job-take URL")

    def url(name: str, route: str) -> str:
        # A missing RunPod variable is derived from job-take, as the runpod SDK derives job-stop.
        template = env.get(name) or _sibling(take, route)
        return template.replace("$RUNPOD_POD_ID", worker_id)

    return {
        "take_url": take,
        "take_batch_url": take.replace("/job-take/", "/job-take-batch/"),
        "done_url": url("RUNPOD_WEBHOOK_POST_OUTPUT", f"job-done/{worker_id}/$ID"),
        "stream_url": url("RUNPOD_WEBHOOK_POST_STREAM", f"job-stream/{worker_id}/$ID"),
        "ping_url": url("RUNPOD_WEBHOOK_PING", f"ping/{worker_id}"),
        "stop_url": take.replace("/job-take/", "/job-stop/"),
    }


def _sibling(take_url: str, route: str) -> str:
    """Return `route` under the same endpoint as `take_url`, keeping its query string."""
    prefix, _, rest = take_url.partition("/job-take/")
    query = rest.partition("?")[2]
    return f"{prefix}/{route}" + (f"?{query}" if query else "")


def _take_ahead(env: Mapping[str, str]) -> int:
    raw = env.get("LOCKGATE_TAKE_AHEAD")
    try:
        wanted = int(raw) if raw else DEFAULT_TAKE_AHEAD
    except ValueError as err:
        raise ConfigError(f"LOCKGATE_TAKE_AHEAD must be a number of jobs, got {raw!r}") from err
    if not 0 <= wanted <= TAKE_AHEAD_MAX:
        raise ConfigError(f"LOCKGATE_TAKE_AHEAD must be 0 to {TAKE_AHEAD_MAX}, got {wanted}")
    return wanted


def _ping_interval_ms(env: Mapping[str, str]) -> int:
    raw = env.get("LOCKGATE_PING_INTERVAL_MS") or env.get("RUNPOD_PING_INTERVAL")
    try:
        return max(100, int(raw)) if raw else DEFAULT_PING_INTERVAL_MS
    except ValueError as err:
        raise ConfigError(f"ping interval must be milliseconds, got {raw!r}") from err
