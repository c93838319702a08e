"""A plain runpod-SDK worker that tries to act as another worker id (`input.as`) with the
key its process was given, and reports the gateway's answers and its own id and key."""

import os

import requests
import runpod


def handler(job):
    key = os.environ["RUNPOD_AI_API_KEY"]
    ping = os.environ["RUNPOD_WEBHOOK_PING"].replace("$RUNPOD_POD_ID", job["input"]["as"])
    answer = requests.get(ping, headers={"Authorization": key}, timeout=10)
    return {"status": answer.status_code, "me": os.environ["RUNPOD_POD_ID"], "key": key}


runpod.serverless.start({"handler": handler})
