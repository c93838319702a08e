"""A handler that answers with the environment variables a job names (`input.names`) and
its process id: a template's `env` shows in a job's output."""

import os

import lockgate.worker


def handler(job):
    names = job["input"].get("names", [])
    return {"env": {name: os.environ.get(name) for name in names}, "pid": os.getpid()}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
