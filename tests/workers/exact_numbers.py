"""Echoes its input (`echo`), or yields each item of `input["chunks"]` with their aggregate
as its output (`stream`), under lockgate's runtime or the runpod SDK's:
`exact_numbers.py lockgate|runpod echo|stream`."""

import sys


def echo(job):
    return {"echo": job["input"]}


def stream(job):
    yield from job["input"]["chunks"]


if __name__ == "__main__":
    runtime, mode = sys.argv[1:3]
    settings = {"handler": echo if mode == "echo" else stream, "return_aggregate_stream": True}
    if runtime == "runpod":
        import runpod

        runpod.serverless.start(settings)
    else:
        import lockgate.worker

        lockgate.worker.start(settings)
