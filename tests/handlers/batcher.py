"""A batch handler (`start`'s `batch`). argv: sync|async|generator MAX_SIZE WAIT_MS, the
last two as JSON (a test of bad options passes bad ones).

Each output is `{"batch": <jobs in the call>, "i": input.i}`: tests read the batch sizes
the handler saw from the outputs. The call sleeps the largest `input.sleep` of its jobs.
Per job: `input.fail` (a message) returns RunPod's error dict for it, `input.bang` an
exception instance; `input.short` makes the call return one output too few. With
`input.watch` each output also says how many other calls were running when its call began
(`"others"`).
"""

import asyncio
import json
import sys
import time

import lockgate.worker

RUNNING = [0]  # calls in progress


def outputs(jobs, others=0):
    watch = any(job["input"].get("watch") for job in jobs)
    result = []
    for job in jobs:
        given = job["input"]
        if "fail" in given:
            result.append({"error": given["fail"]})
        elif "bang" in given:
            result.append(ValueError(given["bang"]))
        else:
            result.append({"batch": len(jobs), "i": given.get("i")})
            if watch:
                result[-1]["others"] = others
    if any(job["input"].get("short") for job in jobs):
        result.pop()
    return result


def longest_sleep(jobs):
    return max(job["input"].get("sleep", 0) for job in jobs)


def sync_handler(jobs):
    time.sleep(longest_sleep(jobs))
    return outputs(jobs)


async def async_handler(jobs):
    others = RUNNING[0]
    RUNNING[0] += 1
    try:
        await asyncio.sleep(longest_sleep(jobs))
    finally:
        RUNNING[0] -= 1
    return outputs(jobs, others)


def generator_handler(jobs):
    yield outputs(jobs)


if __name__ == "__main__":
    handler = {"sync": sync_handler, "async": async_handler, "generator": generator_handler}
    batch = {"max_size": json.loads(sys.argv[2]), "wait_ms": json.loads(sys.argv[3])}
    lockgate.worker.start({"handler": handler[sys.argv[1]], "batch": batch})
