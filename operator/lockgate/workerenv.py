"""The worker contract (docs/architecture.md, "Worker API"): the environment every worker
gets (local pool, operator).

`$ID` and `$RUNPOD_POD_ID` are placeholders the runpod SDK (and lockgate's runtime)
replace at run time, so one set of URLs serves every worker of an endpoint.
"""

from __future__ import annotations

from lockgate.models import ComputeType, EndpointSpec

# Defaults that a Template's variables (in dev mode: the shell's) may override. The runpod
# SDK (1.8+) runs RunPod's automatic "fitness checks" at start and exits when one fails; one
# of them connects to 8.8.8.8:53, which a cluster without egress refuses, so every runpod
# worker would crash-loop there; and their 4 GB of free memory is more than many CPU
# endpoints (or a laptop running `lockgate dev`) have. lockgate's runtime reads the same
# variable for its own automatic checks. Custom checks (`register_fitness_check`) always
# run (docs/fitness-checks.md).
WORKER_DEFAULTS = {"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true"}


def worker_env(gateway_url: str, endpoint_id: str, worker_key: str) -> dict[str, str]:
    """Both `RUNPOD_*` and `LOCKGATE_*` variables, minus the worker id (set per worker)."""
    base = f"{gateway_url.rstrip('/')}/v2/{endpoint_id}"
    query = f"?endpoint={endpoint_id}"
    return {
        "RUNPOD_WEBHOOK_GET_JOB": f"{base}/job-take/$ID{query}",
        "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/job-done/$RUNPOD_POD_ID/$ID{query}",
        "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/job-stream/$RUNPOD_POD_ID/$ID{query}",
        "RUNPOD_WEBHOOK_PING": f"{base}/ping/$RUNPOD_POD_ID{query}",
        "RUNPOD_AI_API_KEY": worker_key,
        "RUNPOD_ENDPOINT_ID": endpoint_id,
        "LOCKGATE_GATEWAY_URL": gateway_url.rstrip("/"),
        "LOCKGATE_ENDPOINT_ID": endpoint_id,
        "LOCKGATE_WORKER_KEY": worker_key,
    }


def resource_env(
    spec: EndpointSpec, *, cpus_here: int | None = None, gpus_here: int | None = None
) -> dict[str, str]:
    """What a worker is given, as RunPod names it: `RUNPOD_CPU_COUNT` (`vcpuCount`) and, for
    GPU endpoints, `RUNPOD_GPU_COUNT` (`gpuCount`). On a cluster the pod gets exactly that;
    a local worker (dev mode) at most what this machine has (`cpus_here`, `gpus_here`)."""
    cpus = spec.vcpuCount if cpus_here is None else max(1, min(spec.vcpuCount, cpus_here))
    env = {"RUNPOD_CPU_COUNT": str(cpus)}
    if spec.computeType == ComputeType.GPU:
        gpus = spec.gpuCount if gpus_here is None else min(spec.gpuCount, gpus_here)
        env["RUNPOD_GPU_COUNT"] = str(gpus)
    return env


def worker_id_env(worker_id: str) -> dict[str, str]:
    """The per-worker part: its id under both names, and as `RUNPOD_POD_HOSTNAME` (on RunPod
    the worker container's host name; a pod's host name is its name, the worker id)."""
    return {
        "RUNPOD_POD_ID": worker_id,
        "LOCKGATE_WORKER_ID": worker_id,
        "RUNPOD_POD_HOSTNAME": worker_id,
    }
