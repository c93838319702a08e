"""A plain runpod-SDK worker that shares files through its network volume: `write`
writes `text` to `path` under RUNPOD_VOLUME_PATH (/runpod-volume), then keeps the job
`hold` seconds (so that another worker takes the next job); `read` reads `path` back.
Each answer names the worker pod (RUNPOD_POD_ID) and its uid."""

import os
import time
from pathlib import Path

import runpod


def handler(job):
    args = job["input"]
    path = Path(os.environ.get("RUNPOD_VOLUME_PATH", "/runpod-volume")) / args["path"]
    answer = {"worker": os.environ.get("RUNPOD_POD_ID"), "uid": os.getuid()}
    if "write" in args:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["write"])
        time.sleep(args.get("hold", 0))
        return {**answer, "wrote": str(path)}
    return {**answer, "text": path.read_text()}


runpod.serverless.start({"handler": handler})
