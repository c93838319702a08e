"""A generator runpod-SDK worker with return_aggregate_stream: yields `n` text chunks
(or one long string, or one large object)."""

import time

import runpod


def handler(job):
    if big := job["input"].get("big"):  # one string chunk of `big` two-byte characters
        yield "é" * big
        return
    if rows := job["input"].get("rows"):  # one object chunk of `rows` rows, ~40 bytes each
        yield {"rows": [{"i": i, "text": f"row {i} é🚀"} for i in range(rows)], "n": rows}
        return
    for i in range(job["input"].get("n", 3)):
        time.sleep(job["input"].get("gap", 0))
        yield {"text": [f"token-{i}"], "output_tokens": i + 1}


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
