"""A worker that takes one job and never runs it: on SIGTERM it exits 0 at once (as the
runpod SDK does when a job reached it after its shutdown began)."""

import os
import signal
import sys
import urllib.request

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
url = os.environ["RUNPOD_WEBHOOK_GET_JOB"].replace("$ID", os.environ["RUNPOD_POD_ID"])
request = urllib.request.Request(url, headers={"Authorization": os.environ["RUNPOD_AI_API_KEY"]})
while True:
    with urllib.request.urlopen(request, timeout=60) as response:
        if response.status == 200:
            print("took", response.read()[:100], flush=True)
            break
while True:
    signal.pause()
