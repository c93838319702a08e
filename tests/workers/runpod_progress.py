"""A runpod-SDK worker that reports progress with `progress_update`, then holds its job
until the file named by `release` exists, and returns "done"."""

import os
import time

import runpod


def handler(job):
    runpod.serverless.progress_update(job, {"step": 1, "of": 2})
    time.sleep(0.5)  # each update is its own thread: keep them in order
    runpod.serverless.progress_update(job, {"step": 2, "of": 2})
    deadline = time.monotonic() + 60
    while not os.path.exists(job["input"]["release"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return "done"


runpod.serverless.start({"handler": handler})
