"""Ready-to-deploy repositories made by tests: a git repository holding a `.runpod/hub.json`
(and a handler that prints its variables), as a RunPod Hub listing has them."""

from __future__ import annotations

import json
import site
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.gitrepo import make_repo

# A handler that answers with the variables the listing's form set. Run by the build's
# venv in dev mode, it borrows this project's site-packages and source for
# `lockgate.worker` (no pip install in a test), as tests/test_v2_builds.py's does.
HANDLER = f"""import os, sys
sys.path[:0] = [{str(Path(site.getsitepackages()[0]))!r}, {str(REPO / "operator")!r}]
import lockgate.worker

REVISION = 1

def handler(job):
    return {{"model": os.environ.get("MODEL_NAME"), "tokens": os.environ.get("MAX_TOKENS"),
            "quant": os.environ.get("QUANTIZE"), "fixed": os.environ.get("FIXED_VAR"),
            "revision": REVISION}}

if __name__ == "__main__":
    print("hub handler loading", flush=True)
    lockgate.worker.start({{"handler": handler}})
"""


HUB: dict[str, Any] = {
    "title": "Tiny echo LLM",
    "description": "A listing made by lockgate's tests: it echoes its settings.",
    "type": "serverless",
    "category": "language",
    "config": {
        "runsOn": "GPU",
        "containerDiskInGb": 30,
        "gpuCount": 2,
        "gpuIds": "AMPERE_24,-NVIDIA GeForce RTX 3090",
        "allowedCudaVersions": ["12.4", "12.1"],
        "presets": [
            {"name": "Big model", "defaults": {"MODEL_NAME": "org/big", "MAX_TOKENS": 4096}},
        ],
        "env": [
            {"key": "FIXED_VAR", "value": "always"},
            {"key": "MODEL_NAME", "input": {
                "name": "Model", "type": "string", "description": "Hugging Face model",
                "default": "org/small"}},
            {"key": "MAX_TOKENS", "input": {
                "name": "Max tokens", "type": "number", "default": 512, "min": 16,
                "max": 8192}},
            {"key": "QUANTIZE", "input": {
                "name": "Quantization", "type": "string", "default": "none",
                "options": [{"label": "None", "value": "none"}, {"label": "AWQ", "value": "awq"}],
                "advanced": True}},
        ],
    },
}  # fmt: skip


def hub_repo(path: Path, hub: dict[str, Any] | None = None, *, where: str = ".runpod") -> Path:
    """A repository at `path` with the handler and `hub` (default HUB) in `where`
    (`.runpod` or `.` for the root)."""
    name = "hub.json" if where == "." else f"{where}/hub.json"
    files = {"handler.py": HANDLER, name: json.dumps(hub if hub is not None else HUB, indent=2)}
    return make_repo(path, files, "a ready-to-deploy repository")
