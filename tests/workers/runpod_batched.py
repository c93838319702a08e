"""A runpod-SDK worker whose handler is `lockgate.worker.batched`: argv MAX_SIZE WAIT_MS.
Each output is `{"batch": <jobs in the call>, "i": input.i}`; `input.fail` fails that job."""

import sys

import runpod

import lockgate.worker


def embed(jobs):
    return [
        {"error": job["input"]["fail"]}
        if "fail" in job["input"]
        else {"batch": len(jobs), "i": job["input"].get("i")}
        for job in jobs
    ]


max_size, wait_ms = int(sys.argv[1]), int(sys.argv[2])
handler = lockgate.worker.batched(embed, max_size=max_size, wait_ms=wait_ms)
runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda _: 2 * max_size})
