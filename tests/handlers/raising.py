"""A handler that raises."""

import lockgate.worker


def handler(job):
    raise ValueError("bad input")


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
