"""A runpod-SDK worker that misbehaves as its environment says (issue 47's tests).

At start, before the SDK's loop:
- `TROUBLE_FITNESS=<reason>`: a fitness check `check_trouble` that raises RuntimeError(reason)
  (the SDK then reports `status=unhealthy` to its ping URL and exits 1).
- `TROUBLE_SLEEP_AT_IMPORT=1`: sleeps forever (a worker that never becomes ready).
- `TROUBLE_EXIT_AT_IMPORT=<code>`: prints `TROUBLE_EXIT_LINE` (default "cannot load the
  model") and exits with that code.

Per job, each key of `input` optional, in this order:
- `append`: a file path: appends the job id as a line (a count of runs that survives the
  worker); the output's `runs` is the file's line count after it.
- `touch`: a file path, created. `exists`: a file path; the output's `exists` says if it is.
- `sleep`: seconds. `fail`: raises ValueError(fail).
The output also names the worker (`worker`: RUNPOD_POD_ID).
"""

import os
import sys
import time

import runpod

if reason := os.environ.get("TROUBLE_FITNESS"):

    @runpod.serverless.register_fitness_check
    def check_trouble() -> None:
        raise RuntimeError(reason)


if os.environ.get("TROUBLE_SLEEP_AT_IMPORT"):
    print("loading weights (forever)", flush=True)
    while True:
        time.sleep(3600)

if code := os.environ.get("TROUBLE_EXIT_AT_IMPORT"):
    print(os.environ.get("TROUBLE_EXIT_LINE", "cannot load the model"), flush=True)
    sys.exit(int(code))


def handler(job):
    args = job["input"] or {}
    out = {"worker": os.environ.get("RUNPOD_POD_ID", "")}
    if path := args.get("append"):
        with open(path, "a") as f:
            f.write(job["id"] + "\n")
        with open(path) as f:
            out["runs"] = sum(1 for _ in f)
    if path := args.get("touch"):
        open(path, "a").close()
    if path := args.get("exists"):
        out["exists"] = os.path.exists(path)
    time.sleep(args.get("sleep", 0))
    if args.get("fail"):
        raise ValueError(args["fail"])
    return out


runpod.serverless.start({"handler": handler})
