"""A sync generator that streams one chunk per word; aggregates when asked by argv."""

import sys

import lockgate.worker


def handler(job):
    for word in job["input"]["text"].split():
        yield {"word": word}


if __name__ == "__main__":
    aggregate = "--no-aggregate" not in sys.argv
    lockgate.worker.start({"handler": handler, "return_aggregate_stream": aggregate})
