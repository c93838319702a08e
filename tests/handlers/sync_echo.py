"""A sync handler: echoes the input."""

import lockgate.worker


def handler(job):
    return {"echo": job["input"]}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
