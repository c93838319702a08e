"""`lockgate jobs run|status|stream|cancel|list`, over the job API (`/v2/{endpoint}/...`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote

from lockgate.client import ApiClient, ClientError
from lockgate.commands.session import emit
from lockgate.models.joberror import read_error

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
JOB_COLUMNS = ("id", "status", "delay ms", "execution ms", "output", "error")
LIST_COLUMNS = ("id", "status", "created", "delay ms", "execution ms", "worker", "error")
STREAM_POLL_S = 0.5  # how often `jobs stream` asks for new chunks
RUN_WAIT_S = 300.0  # `jobs run --wait`: how long it waits for the end (as /runsync's maximum)
FIRST_LOOK_MS = 1_000  # a job that ends this soon is shown with no note
LOOK_EVERY_MS = 5_000  # then each /status call holds this long


def error_line(error: Any) -> str | None:
    """A job's error as one line (`ValueError: bad input`, not the SDK's JSON string)."""
    read = read_error(error)
    return read.line() if read else None


def job_row(job: dict[str, Any]) -> list[Any]:
    """A job (`/status`, `/run`, `/runsync`, `/cancel` answer) as a table row."""
    return [
        job.get("id"),
        job.get("status"),
        job.get("delayTime"),
        job.get("executionTime"),
        job.get("output"),
        error_line(job.get("error")),
    ]


def show_job(args: argparse.Namespace, job: dict[str, Any]) -> None:
    """The job as `-o` asks; in a table, its error's traceback follows on stderr, as lines."""
    emit(args, job, JOB_COLUMNS, [job_row(job)])
    read = read_error(job.get("error"))
    if read and read.traceback and (getattr(args, "output", None) or "table") == "table":
        lines = "\n".join(f"  {line}" for line in read.traceback.splitlines())
        print(f"the worker's traceback:\n{lines}", file=sys.stderr, flush=True)


def job_input(text: str) -> Any:
    """`jobs run`'s INPUT: JSON, `-` for stdin, or `@FILE`."""
    source = text
    if text == "-":
        source = sys.stdin.read()
    elif text.startswith("@"):
        try:
            with open(text[1:]) as handle:
                source = handle.read()
        except OSError as err:
            raise ClientError(f"input {text}: {err.strerror}") from err
    try:
        return json.loads(source)
    except ValueError as err:
        raise ClientError(f'input is not JSON ({err}); e.g. \'{{"prompt": "hi"}}\'') from err


def base(endpoint: str) -> str:
    return f"/v2/{quote(endpoint, safe='')}"


def exit_code(job: dict[str, Any]) -> int:
    """0 unless the job ended without success (FAILED, CANCELLED, TIMED_OUT): 1."""
    return 1 if job.get("status") in FINAL - {"COMPLETED"} else 0


async def run_job(args: argparse.Namespace, api: ApiClient) -> int:
    body: dict[str, Any] = {"input": job_input(args.input)}
    job = await api.call("POST", f"{base(args.endpoint)}/run", body=body)
    if args.wait and job.get("status") not in FINAL:
        job = await wait_for_end(api, args.endpoint, job)
    show_job(args, job)
    return exit_code(job)


async def wait_for_end(api: ApiClient, endpoint: str, job: dict[str, Any]) -> dict[str, Any]:
    """The job once it ended, or as it is after `RUN_WAIT_S`; meanwhile each new reason
    it waits (`/status?position=1`'s `waiting`: a crash loop, a maximum of 0, every worker
    busy, with its place in the queue) is one line on stderr, so a stuck job is not silent.
    The reason comes with each held `/status` answer: no request of its own."""
    deadline = asyncio.get_running_loop().time() + RUN_WAIT_S
    status = f"{base(endpoint)}/status/{quote(job['id'])}"
    said = None
    wait_ms = FIRST_LOOK_MS
    while True:
        job = await api.call("GET", status, params={"wait": wait_ms, "position": 1})
        left_s = deadline - asyncio.get_running_loop().time()
        if job.get("status") in FINAL or left_s <= 0:
            return job
        note = waiting_note(job)
        if note and note != said:
            print(f"lockgate: job {job['id']} waits: {note}", file=sys.stderr, flush=True)
        said = note or said
        wait_ms = int(min(LOOK_EVERY_MS, left_s * 1000))


def waiting_note(job: dict[str, Any]) -> str | None:
    """Why a queued job waits (`/status?position=1`'s `waiting`), else None."""
    note = job.get("waiting") if job.get("status") == "IN_QUEUE" else None
    return note if isinstance(note, str) and note else None


async def job_status(args: argparse.Namespace, api: ApiClient) -> int:
    params = {"wait": args.wait_ms} if args.wait_ms else None
    job = await api.call("GET", f"{base(args.endpoint)}/status/{quote(args.job)}", params=params)
    show_job(args, job)
    return exit_code(job)


async def cancel_job(args: argparse.Namespace, api: ApiClient) -> None:
    job = await api.call("POST", f"{base(args.endpoint)}/cancel/{quote(args.job)}")
    emit(args, job, JOB_COLUMNS, [job_row(job)])


async def stream_job(args: argparse.Namespace, api: ApiClient) -> int:
    """Each chunk's output as it comes, one JSON line each, until the job ends."""
    path = f"{base(args.endpoint)}/stream/{quote(args.job)}"
    while True:
        answer = await api.call("GET", path)
        for chunk in answer.get("stream") or []:
            print(json.dumps(chunk.get("output", chunk)), flush=True)
        if answer.get("status") in FINAL and not answer.get("stream"):
            if answer.get("status") != "COMPLETED":
                print(f"job {args.job}: {answer.get('status')}", file=sys.stderr)
            return exit_code(answer)
        await asyncio.sleep(STREAM_POLL_S)


async def list_jobs(args: argparse.Namespace, api: ApiClient) -> None:
    params = {"status": args.status, "limit": args.limit}
    page = await api.call("GET", f"{base(args.endpoint)}/requests", params=params)
    items = page.get("items") or []
    rows = [
        [j.get("id"), j.get("status"), j.get("createdAt"), j.get("delayTime"),
         j.get("executionTime"), j.get("workerId"), error_line(j.get("error"))]
        for j in items
    ]  # fmt: skip
    emit(args, page, LIST_COLUMNS, rows)
