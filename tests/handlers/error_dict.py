"""A handler that reports an error the RunPod way: a dict with an "error" key."""

import lockgate.worker


def handler(job):
    return {"error": "model not loaded", "partial": job["input"]}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
