"""Running the four kinds of handler and turning what they return into a job-done body.

The return value semantics are those of the runpod SDK's `run_job`: a dict's `error` key
fails the job (the rest of the dict is the output), `refresh_worker` asks for a fresh
worker after the job, an empty output is left out; any other value is the output.
Generators stream: each yielded value is sent as one chunk, and a yielded dict with an
`error` ends the job with that error.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from . import codec
from .logs import log

Job = dict[str, Any]
Handler = Callable[[Job], Any]
ChunkSink = Callable[[Any], Awaitable[None]]

_DONE = object()  # marks an exhausted generator


class HandlerKind(enum.Enum):
    """How a handler runs: sync kinds in a thread, async kinds on the event loop."""

    SYNC = "sync"
    ASYNC = "async"
    GENERATOR = "generator"
    ASYNC_GENERATOR = "async generator"

    @property
    def in_thread(self) -> bool:
        """Whether the handler's code runs in a thread, where it cannot be cancelled."""
        return self in (HandlerKind.SYNC, HandlerKind.GENERATOR)

    @property
    def streams(self) -> bool:
        """Whether the handler yields chunks."""
        return self in (HandlerKind.GENERATOR, HandlerKind.ASYNC_GENERATOR)


@dataclass(frozen=True)
class Outcome:
    """What one job produced: the job-done body and how to send it."""

    body: dict[str, Any]
    is_stream: bool = False
    refresh_worker: bool = False

    @property
    def failed(self) -> bool:
        """Whether the job ends FAILED."""
        return "error" in self.body


def kind_of(handler: Handler) -> HandlerKind:
    """Classify a handler function (or callable object, or partial) by how it must run."""
    for candidate in (handler, type(handler).__call__):
        if inspect.isasyncgenfunction(candidate):
            return HandlerKind.ASYNC_GENERATOR
        if inspect.isgeneratorfunction(candidate):
            return HandlerKind.GENERATOR
        if inspect.iscoroutinefunction(candidate):
            return HandlerKind.ASYNC
    return HandlerKind.SYNC


async def run(
    handler: Handler,
    job: Job,
    *,
    send_chunk: ChunkSink,
    aggregate: bool = False,
    kind: HandlerKind | None = None,
    executor: Executor | None = None,
) -> Outcome:
    """Run `handler` on `job`; a handler exception becomes a one-line `error`.

    Cancelling the calling task stops an async handler; a sync one runs on in its thread.
    """
    kind = kind or kind_of(handler)
    try:
        value = await _call(handler, job, kind, executor)
    except Exception as exc:
        return _failed(job, exc, is_stream=kind.streams)
    if inspect.isgenerator(value) or inspect.isasyncgen(value):
        return await _stream(job, value, send_chunk, aggregate, executor)
    body, refresh = normalise(value)
    return Outcome(body, refresh_worker=refresh)


def normalise(value: Any) -> tuple[dict[str, Any], bool]:
    """Return the job-done body for a handler's return value, and whether to refresh."""
    if not isinstance(value, dict):
        return {"output": value}, False
    output = dict(value)  # the handler's own dict stays as it was
    error = output.pop("error", None)
    refresh = bool(output.pop("refresh_worker", None))
    body: dict[str, Any] = {"output": output} if output else {}
    if error:
        body["error"] = error_text(error)
    return body, refresh


def error_message(exc: BaseException) -> str:
    """Return a one-line `Type: message` for an exception (the traceback stays local)."""
    message = " ".join(line.strip() for line in str(exc).splitlines()).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def error_text(error: Any) -> str:
    """Return a handler-supplied error as the string the job API promises."""
    if isinstance(error, str):
        return error
    try:
        return codec.dumps(error).decode()
    except (TypeError, ValueError):
        return str(error)


async def _call(handler: Handler, job: Job, kind: HandlerKind, executor: Executor | None) -> Any:
    if kind is HandlerKind.SYNC:
        value = await asyncio.get_running_loop().run_in_executor(executor, handler, job)
    else:
        value = handler(job)  # a generator's body does not run until it is iterated
    return await value if inspect.isawaitable(value) else value


async def _stream(
    job: Job, generator: Any, send_chunk: ChunkSink, aggregate: bool, executor: Executor | None
) -> Outcome:
    chunks: list[Any] = []
    try:
        while (value := await _next(generator, executor)) is not _DONE:
            if isinstance(value, dict) and value.get("error"):
                await _close(generator, executor)
                return Outcome({"error": error_text(value["error"])}, is_stream=True)
            await send_chunk(value)
            if aggregate:
                chunks.append(value)
    except Exception as exc:
        return _failed(job, exc, is_stream=True)
    return Outcome({"output": chunks}, is_stream=True)


def _failed(job: Job, exc: Exception, *, is_stream: bool) -> Outcome:
    log.error("job %s handler raised", job.get("id"), exc_info=exc)
    return Outcome({"error": error_message(exc)}, is_stream=is_stream)


async def _next(generator: Any, executor: Executor | None) -> Any:
    if inspect.isasyncgen(generator):
        return await anext(generator, _DONE)
    return await asyncio.get_running_loop().run_in_executor(executor, next, generator, _DONE)


async def _close(generator: Any, executor: Executor | None) -> None:
    if inspect.isasyncgen(generator):
        await generator.aclose()
    else:
        await asyncio.get_running_loop().run_in_executor(executor, generator.close)
