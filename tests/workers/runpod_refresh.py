"""A runpod-SDK worker whose every job asks for a fresh worker (`refresh_worker`); the output
names the worker that ran it."""

import os

import runpod


def handler(job):
    return {"worker": os.environ["RUNPOD_POD_ID"], "refresh_worker": True}


runpod.serverless.start({"handler": handler})
