"""Dynamic batching: jobs taken one by one handed to the handler as one list.

`start({"handler": fn, "batch": {"max_size": 32, "wait_ms": 10}})` calls `fn(jobs)` with
up to `max_size` jobs, once `max_size` are waiting or `wait_ms` after the first, whichever
comes first; one call at a time, the next batch forming while a call runs. `fn` returns
one output per job, in the same order; an item that is an exception or a dict with an
`error` fails that job alone (RunPod's error dict). Each job keeps its own life: stopped
(cancel, its executionTimeout) it is let go at once, and its output is dropped when the
call returns.

The runpod SDK calls its handler once per job, each an asyncio task of one event loop:
`batched(fn, max_size=32)` is a per-job async handler that forms the batches itself, for
`runpod.serverless.start({"handler": batched(fn, ...), "concurrency_modifier": ...})`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from . import handlers
from .handlers import Handler, HandlerKind, Job, Outcome
from .logs import log

MAX_SIZE_LIMIT = 1024  # jobs in one call: also the most a worker takes in one job-take-batch
WAIT_MS_LIMIT = 60_000  # a job's longest wait for its batch to fill


class BatchOptionsError(ValueError):
    """The `batch` setting given to `start()` is not usable."""


@dataclass(frozen=True)
class BatchOptions:
    """How batches are formed: up to `max_size` jobs, waiting at most `wait_ms` for them."""

    max_size: int
    wait_ms: float

    @classmethod
    def from_value(cls, value: Any) -> BatchOptions:
        """Validate `start()`'s `batch` value; raise BatchOptionsError saying what is wrong."""
        if not isinstance(value, dict):
            raise BatchOptionsError(
                'batch must be a dict like {"max_size": 32, "wait_ms": 10}, '
                f"got {type(value).__name__}"
            )
        unknown = sorted(set(value) - {"max_size", "wait_ms"})
        if unknown:
            raise BatchOptionsError(f"batch has unknown keys {unknown}: use max_size, wait_ms")
        max_size, wait_ms = value.get("max_size"), value.get("wait_ms", 10)
        if not _is_int(max_size) or not 1 <= max_size <= MAX_SIZE_LIMIT:
            raise BatchOptionsError(
                f"batch max_size must be an integer from 1 to {MAX_SIZE_LIMIT}, got {max_size!r}"
            )
        if not _is_number(wait_ms) or not 0 <= wait_ms <= WAIT_MS_LIMIT:
            raise BatchOptionsError(
                f"batch wait_ms must be a number of milliseconds from 0 to {WAIT_MS_LIMIT}, "
                f"got {wait_ms!r}"
            )
        return cls(max_size=max_size, wait_ms=float(wait_ms))


def check_handler(kind: HandlerKind) -> None:
    """Refuse a handler that cannot take a batch: a generator streams one job's chunks."""
    if kind.streams:
        raise BatchOptionsError(
            f"a {kind.value} handler streams and cannot take a batch: "
            "drop `batch`, or return a list instead of yielding"
        )


def outcomes(value: Any, count: int) -> list[Outcome]:
    """Each job's outcome from a batch handler's return value for `count` jobs.

    A list of `count` items: an exception or a dict with `error` fails its job alone, any
    other item is the job's output (as a single job's return value). Anything else fails
    every job of the call with the same error.
    """
    if not isinstance(value, list | tuple):
        error = f"batch handler must return a list of outputs, got {type(value).__name__}"
        return [Outcome({"error": error})] * count
    if len(value) != count:
        error = f"batch handler returned {len(value)} outputs for {count} jobs"
        return [Outcome({"error": error})] * count
    return [_outcome(item) for item in value]


def _outcome(item: Any) -> Outcome:
    if isinstance(item, BaseException):
        return Outcome({"error": handlers.error_message(item)})
    body, refresh = handlers.normalise(item)
    return Outcome(body, refresh_worker=refresh)


async def call(
    handler: Handler, jobs: Sequence[Job], kind: HandlerKind, executor: Executor | None
) -> list[Outcome]:
    """Call the handler once on `jobs`; a raised exception fails each of them."""
    try:
        if kind is HandlerKind.SYNC:
            loop = asyncio.get_running_loop()
            value = await loop.run_in_executor(executor, handler, list(jobs))
        else:
            value = handler(list(jobs))
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        log.error("batch of %d job(s) handler raised", len(jobs), exc_info=exc)
        return [Outcome({"error": handlers.error_message(exc)})] * len(jobs)
    return outcomes(value, len(jobs))


def batched(fn: Handler, *, max_size: int, wait_ms: float = 10) -> Callable[[Job], Awaitable[Any]]:
    """A one-job async handler that hands `fn` batches, for a runtime that calls its handler
    once per job and runs several at once on one event loop (the runpod SDK's with a
    `concurrency_modifier` of 2 x `max_size`: one batch in the call, the next forming). A
    failed job's value is RunPod's `{"error": ...}` dict. Raises BatchOptionsError for bad
    options or a generator `fn`."""
    options = BatchOptions.from_value({"max_size": max_size, "wait_ms": wait_ms})
    kind = handlers.kind_of(fn)
    check_handler(kind)
    made: list[Batcher] = []  # made in the first job's event loop

    async def one_job(job: Job) -> Any:
        if not made:
            from .metrics import batch_metrics

            metrics = batch_metrics()
            observe = metrics.observe if metrics is not None else None
            made.append(Batcher(fn, options, kind=kind, executor=None, observe=observe))
        outcome = await made[0].run(job)
        if outcome.failed:
            return {"error": outcome.body["error"]}
        output = outcome.body.get("output")
        if outcome.refresh_worker:
            return {**output, "refresh_worker": True} if isinstance(output, dict) else output
        return output

    return one_job


Observer = Callable[[int, float], None]  # (batch size, seconds its first job waited)
Abandoned = Callable[[list[str]], None]  # the job ids of a sync call left in its thread


@dataclass
class _Waiting:
    job: Job
    result: asyncio.Future[Outcome]
    since: float  # time.monotonic() when it was given


class Batcher:
    """Forms batches of the jobs given to `run` and calls the handler once per batch, one
    call at a time: the next batch forms while a call runs, and goes when it ends."""

    def __init__(
        self,
        handler: Handler,
        options: BatchOptions,
        *,
        kind: HandlerKind,
        executor: Executor | None,
        observe: Observer | None = None,
        abandoned: Abandoned | None = None,
    ) -> None:
        self._handler = handler
        self._abandoned = abandoned
        self._options = options
        self._kind = kind
        self._executor = executor
        self._observe = observe
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._due = False  # the first waiting job's wait_ms has passed
        self._current: asyncio.Task[None] | None = None  # the call running, if any

    async def run(self, job: Job) -> Outcome:
        """The outcome of `job`, run in the next batch. Cancelled, the job leaves its batch
        (if it was not handed over yet) or its output is dropped."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(job, loop.create_future(), time.monotonic())
        self._waiting.append(waiting)
        if len(self._waiting) == 1:
            self._arm()
        if len(self._waiting) >= self._options.max_size:
            self._flush()
        return await waiting.result

    def _arm(self) -> None:
        """Start the wait of the first waiting job."""
        if self._timer is not None:
            self._timer.cancel()
        left_s = self._waiting[0].since + self._options.wait_ms / 1000 - time.monotonic()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, left_s), self._waited)
        self._due = False

    def _waited(self) -> None:
        self._timer, self._due = None, True
        self._flush()

    def _flush(self) -> None:
        """Hand the waiting jobs over, up to max_size, if they are due and no call runs."""
        self._waiting = [w for w in self._waiting if not w.result.done()]
        full = len(self._waiting) >= self._options.max_size
        if self._current is not None or not self._waiting or not (full or self._due):
            return
        batch = self._waiting[: self._options.max_size]
        self._waiting = self._waiting[self._options.max_size :]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due = False
        if self._waiting:
            self._arm()  # the jobs left over wait from when they came
        waited_s = time.monotonic() - batch[0].since
        if self._observe is not None:
            self._observe(len(batch), waited_s)
        log.debug(
            "batch of %d job(s) after %.1f ms: %s",
            len(batch),
            waited_s * 1000,
            " ".join(str(w.job.get("id")) for w in batch),
        )
        task = asyncio.create_task(self._call(batch), name=f"batch of {len(batch)}")
        self._current = task
        for waiting in batch:
            waiting.result.add_done_callback(lambda _, b=batch, t=task: self._left(b, t))

    async def _call(self, batch: list[_Waiting]) -> None:
        try:
            jobs = [w.job for w in batch]
            results = await call(self._handler, jobs, self._kind, self._executor)
            for waiting, outcome in zip(batch, results, strict=True):
                if not waiting.result.done():
                    waiting.result.set_result(outcome)
        finally:
            self._ended(asyncio.current_task())

    def _left(self, batch: list[_Waiting], task: asyncio.Task[None]) -> None:
        """A job of a running call ended or was stopped: when none is left waiting for the
        call, an async one is cancelled, a sync one left to end in its thread (its outputs
        dropped; `abandoned` told), and the next batch goes."""
        if task.done() or not all(w.result.cancelled() for w in batch):
            return
        if self._kind.in_thread:
            log.warning("every job of a batch call was stopped; its thread runs on, ignored")
            if self._abandoned is not None:
                self._abandoned([str(w.job.get("id")) for w in batch])
        else:
            task.cancel()
        self._ended(task)

    def _ended(self, task: asyncio.Task[None] | None) -> None:
        if self._current is task:
            self._current = None
            self._flush()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value
