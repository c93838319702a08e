"""A handler that prints: `{"say": "word"}` goes to stdout and stderr, `{"fail": true}` raises."""

import sys

import lockgate.worker


def handler(job):
    word = job["input"].get("say", "nothing")
    print(f"stdout says {word}", flush=True)
    print(f"stderr says {word}", file=sys.stderr, flush=True)
    if job["input"].get("fail"):
        raise RuntimeError(f"failing on purpose: {word}")
    return {"said": word}


if __name__ == "__main__":
    print("printing handler loading", flush=True)
    lockgate.worker.start({"handler": handler})
