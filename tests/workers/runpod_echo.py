"""A plain runpod-SDK worker: echoes its input; `sleep` seconds first; `fail` raises."""

import time

import runpod


def handler(job):
    args = job["input"]
    time.sleep(args.get("sleep", 0))
    if args.get("fail"):
        raise ValueError(args["fail"])
    return {"echo": args}


runpod.serverless.start({"handler": handler})
