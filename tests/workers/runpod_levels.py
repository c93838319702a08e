"""A runpod-SDK worker that logs at each level with its job id: `{"say": word}` logs
`debug says word`, `info says …`, `warn says …` and `error says …` through `RunPodLogger`
(JSON lines, as every worker has RUNPOD_ENDPOINT_ID), and prints `print says word`."""

import runpod

log = runpod.RunPodLogger()


def handler(job):
    word = job["input"].get("say", "nothing")
    for level in ("debug", "info", "warn", "error"):
        getattr(log, level)(f"{level} says {word}", request_id=job["id"])
    print(f"print says {word}", flush=True)
    return {"said": word}


runpod.serverless.start({"handler": handler})
