"""A tiny network with fixed weights, on PyTorch (GPU when there is one) or pure Python.

It computes XOR of two inputs: hidden = relu(W1·x + b1), score = W2·hidden + b2, and a
point is 1 when its score is above 0.5. Small enough to read, real enough to show the
pattern a GPU worker follows: load the model once at start, move it to the device, run
each job's batch under `torch.inference_mode()`. A real model loads its weights here
instead, e.g. from `LOCKGATE_MODEL_PATH` (the file a Template's `modelUrl` becomes).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("examples.pytorch")

W1 = [[1.0, 1.0], [1.0, 1.0]]
B1 = [0.0, -1.0]
W2 = [1.0, -2.0]
B2 = 0.0
THRESHOLD = 0.5


class PythonModel:
    """The same network in plain Python: the fallback where torch is not installed."""

    backend = "python"
    device = "cpu"

    def scores(self, points: list[list[float]]) -> list[float]:
        out = []
        for x in points:
            hidden = [max(0.0, sum(w * v for w, v in zip(row, x, strict=True)) + b)
                      for row, b in zip(W1, B1, strict=True)]  # fmt: skip
            out.append(sum(w * h for w, h in zip(W2, hidden, strict=True)) + B2)
        return out


class TorchModel:
    """The network as a torch module, on CUDA when available."""

    backend = "torch"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        with torch.no_grad():
            first.weight.copy_(torch.tensor(W1))
            first.bias.copy_(torch.tensor(B1))
            second.weight.copy_(torch.tensor([W2]))
            second.bias.copy_(torch.tensor([B2]))
        self.net = torch.nn.Sequential(first, torch.nn.ReLU(), second).to(self.device).eval()

    def scores(self, points: list[list[float]]) -> list[float]:
        with self.torch.inference_mode():
            batch = self.torch.tensor(points, dtype=self.torch.float32, device=self.device)
            return self.net(batch).squeeze(1).cpu().tolist()


def load() -> PythonModel | TorchModel:
    """The torch model when torch imports, else the pure-Python one (said in the log)."""
    try:
        import torch
    except ImportError:
        log.warning("torch is not installed: running the pure-Python fallback on the CPU")
        return PythonModel()
    model = TorchModel(torch)
    log.info("torch %s on %s", torch.__version__, model.device)
    return model


def predict(model: PythonModel | TorchModel, points: list[list[float]]) -> dict[str, Any]:
    """XOR of each point, its score, and where it ran."""
    scores = model.scores(points)
    return {
        "xor": [int(s > THRESHOLD) for s in scores],
        "scores": [round(s, 6) for s in scores],
        "backend": model.backend,
        "device": model.device,
    }
