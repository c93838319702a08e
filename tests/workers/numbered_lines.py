"""Prints numbered lines: `{"lines": N, "tag": "t"}` prints `t 1` … `t N` on stdout (odd
numbers) and stderr (even ones), then sleeps `sleep` seconds and echoes the input."""

import sys
import time

import lockgate.worker


def handler(job):
    args = job["input"]
    tag = args.get("tag", "line")
    for n in range(1, args.get("lines", 0) + 1):
        print(f"{tag} {n}", file=sys.stdout if n % 2 else sys.stderr, flush=True)
    time.sleep(args.get("sleep", 0))
    return {"echo": args}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
