"""Streaming text generation in the spec's text-generation chunk shape.

Each streamed chunk's `output` is `{"input_tokens": int, "output_tokens": int,
"text": [str]}`: the prompt's token count, the tokens generated so far, and the new text.
The "model" is a toy that continues the prompt from a fixed word list (deterministic, no
download), so the example runs anywhere; put a real model's token loop in its place.

Input: {"prompt": str, "max_tokens": int (default 16, at most 512), "delay_ms": int}.
With `return_aggregate_stream`, `/status` (and `/runsync`) return the list of every chunk.

    lockgate dev examples/streaming/handler.py
    curl -H "authorization: $KEY" -d '{"input":{"prompt":"Once upon a time"}}' \
      http://127.0.0.1:8080/v2/streaming/run          # then GET /stream/<id> until final
    python handler.py --test_input '{"input": {"prompt": "hello", "max_tokens": 3}}'
"""

import asyncio
import hashlib

import lockgate.worker

# fmt: off
VOCABULARY = (
    "the", "queue", "waits", "while", "a", "worker", "wakes", "and", "takes", "the", "job",
    "then", "streams", "each", "word", "back", "to", "the", "client", "until", "it", "ends",
)
# fmt: on
MAX_TOKENS = 512
CONCURRENT_JOBS = 4  # an async handler may interleave jobs; endpoint.yaml scales by 4 per worker


def tokens(prompt: str) -> list[str]:
    """Whitespace tokens: enough for a toy; a real model counts with its tokenizer."""
    return prompt.split()


def next_word(prompt: str, position: int) -> str:
    """A deterministic continuation: the same prompt always yields the same text."""
    digest = hashlib.sha256(f"{prompt}\0{position}".encode()).digest()
    return VOCABULARY[digest[0] % len(VOCABULARY)]


async def handler(job):
    job_input = job["input"]
    prompt = str(job_input.get("prompt", ""))
    max_tokens = max(1, min(int(job_input.get("max_tokens", 16)), MAX_TOKENS))
    delay_s = max(0, int(job_input.get("delay_ms", 0))) / 1000
    input_tokens = len(tokens(prompt))
    for position in range(max_tokens):
        if delay_s:
            await asyncio.sleep(delay_s)  # a real model spends this time on the GPU
        word = next_word(prompt, position)
        yield {
            "input_tokens": input_tokens,
            "output_tokens": position + 1,
            "text": [word if position == 0 else f" {word}"],
        }


def concurrency(current: int) -> int:
    """Jobs one worker runs at once (runpod's `concurrency_modifier` contract)."""
    return CONCURRENT_JOBS


if __name__ == "__main__":
    lockgate.worker.start(
        {"handler": handler, "return_aggregate_stream": True, "concurrency_modifier": concurrency}
    )
