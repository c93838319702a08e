"""Echo: returns the job's input. `{"input": {"sleep": 2}}` sleeps 2 s first (for demos).

Run one job locally:   python handler.py --test_input '{"input": {"hello": "world"}}'
Serve a gateway:       LOCKGATE_GATEWAY_URL=… LOCKGATE_ENDPOINT_ID=… python handler.py
"""

import asyncio

import lockgate.worker


async def handler(job):
    seconds = job["input"].get("sleep", 0) if isinstance(job["input"], dict) else 0
    if seconds:
        await asyncio.sleep(float(seconds))
    return {"echo": job["input"]}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
    # The same file runs on RunPod, or on lockgate through RunPod's own SDK:
    #   import runpod
    #   runpod.serverless.start({"handler": handler})
