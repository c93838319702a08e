"""A handler that answers with the environment variables a job names (`input.names`) and
its process id, after sleeping `input.sleep` seconds (default 0): a template's `env` shows
in a job's output, and a long job shows which worker version finished it."""

import os
import time

import lockgate.worker


def handler(job):
    time.sleep(float(job["input"].get("sleep", 0)))
    names = job["input"].get("names", [])
    return {"env": {name: os.environ.get(name) for name in names}, "pid": os.getpid()}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
