"""A PyTorch model worker: uses the GPU when there is one, the CPU otherwise, and plain
Python when torch is not installed (so `lockgate dev` runs it anywhere).

Input: {"points": [[x1, x2], ...]} (at most 4096 points of two numbers each).
Output: {"xor": [0|1, ...], "scores": [...], "backend": "torch"|"python", "device": "cuda"|"cpu"}

    lockgate dev examples/pytorch/handler.py
    python handler.py --test_input '{"input": {"points": [[0, 1], [1, 1]]}}'
"""

import logging

import model

import lockgate.worker

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

MAX_POINTS = 4096
MODEL = model.load()  # once per worker, before the first job: this is the cold start


def parse_points(job_input) -> list[list[float]]:
    points = job_input.get("points") if isinstance(job_input, dict) else None
    if not isinstance(points, list) or not 0 < len(points) <= MAX_POINTS:
        raise ValueError(f'input needs "points": a list of 1 to {MAX_POINTS} [x1, x2] pairs')
    if not all(isinstance(p, list) and len(p) == 2 for p in points):
        raise ValueError("each point is a list of two numbers")
    return [[float(x1), float(x2)] for x1, x2 in points]


def handler(job):
    # A sync handler: the runtime runs it in a thread, so the event loop keeps heartbeats
    # going while the model computes.
    return model.predict(MODEL, parse_points(job["input"]))


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
