"""`python handler.py --test_input '{"input": …}'`: run one job with no gateway."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from . import batching, codec, handlers
from .handlers import Job
from .logs import log
from .options import StartOptions

TEST_INPUT_FILE = "test_input.json"
LOCAL_JOB_ID = "local_test"
HOW_TO_RUN = (
    "nothing to do: no gateway is configured and no test input was given. Either\n"
    "  - run one job locally: python handler.py --test_input '{\"input\": {...}}'\n"
    f"    (or put that JSON in ./{TEST_INPUT_FILE}), or\n"
    "  - serve a gateway: set LOCKGATE_GATEWAY_URL, LOCKGATE_ENDPOINT_ID and\n"
    "    LOCKGATE_WORKER_KEY (or the RUNPOD_WEBHOOK_* variables that RunPod sets)."
)


class LocalInputError(Exception):
    """The test input is missing or is not `{"input": ...}` JSON."""


def read_test_job(test_input: str | None, cwd: Path) -> Job:
    """Return the job to run: `--test_input` if given, else ./test_input.json."""
    if test_input is None:
        path = cwd / TEST_INPUT_FILE
        if not path.is_file():
            raise LocalInputError(HOW_TO_RUN)
        log.info("using %s as the test job", path)
        test_input = path.read_text(encoding="utf-8")
    try:
        job = codec.loads(test_input)
    except ValueError as err:
        raise LocalInputError(f"the test input is not JSON: {err}") from err
    if not isinstance(job, dict) or job.get("input") is None:
        raise LocalInputError('the test input must be a JSON object like {"input": {...}}')
    return {**job, "id": job.get("id") or LOCAL_JOB_ID}


def run_test_job(options: StartOptions, job: Job) -> int:
    """Run `job`, print its result as JSON on stdout; return 0 if it completed, else 1."""
    chunks: list[Any] = []

    async def collect(chunk: Any) -> None:
        codec.dumps(chunk)  # a chunk the gateway could not take fails here too
        log.info("job %s streamed chunk %d", job["id"], len(chunks))
        chunks.append(chunk)

    log.info("job %s started locally", job["id"])
    if options.batch is not None:  # a batch of one
        kind = handlers.kind_of(options.handler)
        outcome = asyncio.run(batching.call(options.handler, [job], kind, None))[0]
    else:
        outcome = asyncio.run(
            handlers.run(
                options.handler, job, send_chunk=collect, aggregate=options.return_aggregate_stream
            )
        )
    report = {"id": job["id"], "status": "FAILED" if outcome.failed else "COMPLETED"}
    report |= outcome.body
    if outcome.is_stream:
        report["stream"] = chunks
    report = _printable(report)
    print(codec.dumps(report).decode(), flush=True)
    return 1 if report["status"] == "FAILED" else 0


def main(options: StartOptions, test_input: str | None) -> int:
    """Run the test job named by the command line or the working directory."""
    try:
        job = read_test_job(test_input, Path.cwd())
    except LocalInputError as err:
        print(f"lockgate.worker: {err}", file=sys.stderr)
        return 1
    return run_test_job(options, job)


def _printable(report: dict[str, Any]) -> dict[str, Any]:
    try:
        codec.dumps(report)
    except (TypeError, ValueError) as err:
        log.error("job %s output is not JSON: %s", report["id"], err)
        return {"id": report["id"], "status": "FAILED", "error": handlers.error_message(err)}
    return report
