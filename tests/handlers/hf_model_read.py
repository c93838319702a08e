"""A handler that reads a file of a cached Hugging Face model, offline (HF_HUB_OFFLINE=1)."""

from huggingface_hub import hf_hub_download

import lockgate.worker


def handler(job):
    path = hf_hub_download(job["input"]["repo"], job["input"]["file"])
    with open(path) as f:
        return {"text": f.read(), "path": path}


if __name__ == "__main__":
    lockgate.worker.start({"handler": handler})
