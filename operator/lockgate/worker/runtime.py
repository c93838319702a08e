"""The worker's loops: take jobs, run them, watch for stop signals, send heartbeats, shut down."""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import signal
import sys
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import handlers
from .backoff import Backoff
from .batching import Batcher
from .client import AuthError, GatewayClient, GatewayError
from .config import WorkerConfig
from .handlers import Job
from .jobs import JobsInHand, Slots
from .logs import log
from .metrics import batch_metrics
from .options import StartOptions

EXIT_OK = 0
EXIT_LOOP_FAILED = 1
EXIT_RESTART = 3  # a sync handler was abandoned and re-executing the worker failed
EXIT_INTERRUPTED = 130  # a second SIGINT
RESCALE_EVERY_S = 1.0  # how often a full worker asks concurrency_modifier again
MIN_EMPTY_POLL_S = 0.1  # an empty long-poll answered faster than this is not retried at once
STOP_RETRY_S = 1.0  # wait after a failed job-stop poll
MAX_HANDLER_THREADS = 256  # threads are made only when sync jobs need them
# Taking ahead (`Runtime._ahead`): after SHORT_STREAK jobs in a row that each ran within
# SHORT_JOB_S, and while the last result's answer said more jobs were queued, up to
# `take_ahead` jobs more than the concurrency are taken, each starting the moment a slot
# frees (no round trip to the gateway between two jobs); one that waits WAIT_AHEAD_S for a
# slot goes back to the front of the queue, unstarted.
SHORT_JOB_S = 0.05
SHORT_STREAK = 8
WAIT_AHEAD_S = 0.25


class Runtime:
    """One worker process's life: from the first take to the last result after a signal."""

    def __init__(self, options: StartOptions, config: WorkerConfig) -> None:
        self._options = options
        self._config = config
        self._kind = handlers.kind_of(options.handler)
        self._jobs = JobsInHand()
        self._slots = Slots()
        self._short = 0  # jobs in a row that ran within SHORT_JOB_S
        self._stopping = asyncio.Event()
        self._signalled = False
        self._abandoned: set[str] = set()  # stopped jobs whose sync handler still runs
        self._exit_code = EXIT_OK
        self._concurrency = 1
        self._executor = ThreadPoolExecutor(MAX_HANDLER_THREADS, "lockgate-handler")
        self._client = GatewayClient(config)
        self._batcher: Batcher | None = None
        if options.batch is not None:
            metrics = batch_metrics()
            self._batcher = Batcher(
                options.handler,
                options.batch,
                kind=self._kind,
                executor=self._executor,
                observe=metrics.observe if metrics is not None else None,
                abandoned=self._call_abandoned,
            )

    async def run(self) -> int:
        """Work until a signal or a restart request; return the process exit status."""
        batch = self._options.batch
        log.info(
            "worker %s started: endpoint %s, %s handler%s",
            self._config.worker_id,
            self._config.endpoint_id or "?",
            self._kind.value,
            f", batches of up to {batch.max_size} within {batch.wait_ms:g} ms" if batch else "",
        )
        self._install_signal_handlers()
        async with self._client:
            watchers = [self._spawn(self._ping_loop()), self._spawn(self._stop_loop())]
            taker = self._spawn(self._take_loop())
            await self._stopping.wait()
            taker.cancel()
            await self._jobs.drained()
            for task in (taker, *watchers):
                task.cancel()
            await asyncio.gather(taker, *watchers, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._exit_code == EXIT_RESTART:
            log.info("worker %s stopped, to restart", self._config.worker_id)
        else:
            log.info("worker %s exits with status %d", self._config.worker_id, self._exit_code)
        return self._exit_code

    def shutdown(self, reason: str, exit_code: int = EXIT_OK) -> None:
        """Take no new jobs, finish those in hand, then exit with `exit_code`."""
        self._exit_code = exit_code or self._exit_code
        if not self._stopping.is_set():
            log.info("%s: taking no new jobs, finishing %d in hand", reason, len(self._jobs))
            self._stopping.set()
            self._slots.send_away()  # jobs taken ahead and not started go back

    # -- taking and running jobs

    async def _take_loop(self) -> None:
        backoff = Backoff()
        while True:
            free = self._wanted_concurrency() + self._ahead() - self._jobs.running
            self._slots.admit(self._concurrency)
            if free <= 0:
                await self._jobs.wait_change(RESCALE_EVERY_S)
                continue
            started = time.monotonic()
            try:
                jobs = await self._client.take(free, in_progress=len(self._jobs) > 0)
            except GatewayError as err:
                _report("job-take", err, backoff.delay_s)
                await backoff.wait()
                continue
            backoff.reset()
            for job in jobs:
                self._start_job(job)
            if not jobs and time.monotonic() - started < MIN_EMPTY_POLL_S:
                await asyncio.sleep(MIN_EMPTY_POLL_S)  # the gateway did not hold the poll

    def _wanted_concurrency(self) -> int:
        try:
            wanted = int(self._options.concurrency_modifier(self._concurrency))
        except Exception as err:
            log.error("concurrency_modifier raised %r; keeping %d", err, self._concurrency)
            return self._concurrency
        if wanted != self._concurrency:
            log.info("concurrency %d -> %d", self._concurrency, wanted)
            self._concurrency = max(0, wanted)
        return self._concurrency

    def _ahead(self) -> int:
        """How many jobs to hold beyond the concurrency, waiting for a slot: `take_ahead`
        while the last SHORT_STREAK jobs each ran within SHORT_JOB_S (a job taken ahead
        waits behind another) and the last result's answer said more jobs were queued (a
        worker kept busy one job at a time by one client holds no job ahead), else none;
        never with batches, `refresh_worker` (the next job belongs to a fresh worker) or once
        stopping."""
        if self._short < SHORT_STREAK or not self._client.more_queued:
            return 0
        if self._stopping.is_set():
            return 0
        if self._batcher is not None or self._options.refresh_worker:
            return 0
        return self._config.take_ahead

    def _start_job(self, job: Job) -> None:
        job_id = job.get("id")
        if not isinstance(job_id, str) or not job_id:
            log.error("gateway sent a job without an id; ignored: %.200r", job)
        elif job_id in self._jobs:
            log.warning("job %s is already in hand; duplicate ignored", job_id)
        else:
            task = asyncio.create_task(self._run_job(job_id, job), name=f"job {job_id}")
            self._jobs.add(job_id, task)

    async def _run_job(self, job_id: str, job: Job) -> None:
        try:
            if not await self._slot_for(job_id):
                return
            self._jobs.started(job_id)
            started = time.monotonic()
            # A start and an end line per job at INFO (as the runpod SDK's): the logs API
            # gives the lines in between (the handler's prints, a traceback) to this job.
            log.info("job %s started", job_id)
            refresh = False
            try:
                outcome = await self._outcome(job_id, job)
                took_s = time.monotonic() - started
                self._short = self._short + 1 if took_s <= SHORT_JOB_S else 0
                refresh = outcome.refresh_worker or self._options.refresh_worker
            finally:
                if refresh:  # jobs taken ahead are for a fresh worker: they go back
                    self._short = 0
                    self._slots.send_away()
                self._slots.leave(self._concurrency)  # a job waiting for it starts now
            # Said before the result is sent: its job-done may hold its answer for the next
            # job (take=1); a result not delivered is logged by the client as an error.
            _report_outcome(job_id, outcome, took_s)
            refill = not refresh and self._slot_stays()
            self._jobs.sending(job_id, refilling=refill)
            # As the runpod SDK does: `stopPod` asks the gateway to replace this worker.
            body = {**outcome.body, "stopPod": True} if refresh else outcome.body
            next_job = await self._client.done(
                job_id, body, is_stream=outcome.is_stream, take=refill
            )
        except asyncio.CancelledError:
            log.info("job %s stopped; its result is not sent", job_id)
            return
        finally:
            self._jobs.remove(job_id)
        if next_job is not None:  # taken for this worker: run it, even if stopping now
            self._start_job(next_job)
        if refresh:
            self.shutdown(f"job {job_id} asked for a fresh worker (refresh_worker)")

    async def _slot_for(self, job_id: str) -> bool:
        """Wait for a slot for this job (a job taken ahead waits its turn): True to run it.
        One not started within WAIT_AHEAD_S, or when the worker stops taking jobs, is given
        back to the queue (False); one the gateway cannot take back waits and runs here."""
        waited = time.monotonic()
        within_s = 0 if self._stopping.is_set() else WAIT_AHEAD_S
        if await self._slots.enter(self._concurrency, within_s):
            return True
        given = await self._client.give_back(job_id)
        if given is None:
            return await self._slots.enter(self._concurrency, None)
        self._short = 0  # a job waited too long: jobs are not short now
        why = "stopping" if self._stopping.is_set() else "no slot"
        log.info(
            "job %s given back to the queue unstarted (%s after %.0f ms)%s", job_id, why,
            (time.monotonic() - waited) * 1000, "" if given else ": it was no longer held",
        )  # fmt: skip
        return False

    async def _outcome(self, job_id: str, job: Job) -> handlers.Outcome:
        if self._batcher is not None:
            return await self._batcher.run(job)
        return await handlers.run(
            self._options.handler,
            job,
            send_chunk=functools.partial(self._client.stream, job_id),
            aggregate=self._options.return_aggregate_stream,
            kind=self._kind,
            executor=self._executor,
        )

    def _slot_stays(self) -> bool:
        """Whether a finished job's slot is wanted for another job at once: the result's
        job-done then asks for the next queued job (`take=1`), one request instead of two."""
        wanted = self._wanted_concurrency() + self._ahead()
        return not self._stopping.is_set() and self._jobs.running <= wanted

    # -- stop signals and heartbeats

    async def _stop_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                job_ids = await self._client.stop_signals()
            except GatewayError as err:
                _report("job-stop", err, STOP_RETRY_S)
                await asyncio.sleep(STOP_RETRY_S)
                continue
            for job_id in job_ids:
                self._stop_job(job_id)
            if not job_ids and time.monotonic() - started < MIN_EMPTY_POLL_S:
                await asyncio.sleep(MIN_EMPTY_POLL_S)  # the gateway did not hold the poll

    def _stop_job(self, job_id: str) -> None:
        held = self._jobs.get(job_id)
        if held is None or held.sending:
            log.debug("stop signal for job %s, which is not running here", job_id)
            return
        held.task.cancel()
        if not held.started:  # taken ahead, waiting for a slot: no handler to stop
            log.info("job %s stopping: it had not started", job_id)
            return
        if self._batcher is not None:  # the batch's other jobs go on; its output is dropped
            log.info("job %s stopping: it leaves its batch", job_id)
            return
        if not self._kind.in_thread:
            log.info("job %s stopping: its handler is cancelled", job_id)
            return
        self._abandoned.add(job_id)
        log.warning(
            "job %s stopped, but its sync handler cannot be interrupted in its thread: "
            "it is abandoned, and this worker restarts itself once no other job is in hand",
            job_id,
        )
        self.shutdown("restart for a fresh worker", EXIT_RESTART)

    def _call_abandoned(self, job_ids: list[str]) -> None:
        """Every job of a sync batch call was stopped: as for one stopped sync job, its
        thread is abandoned and the worker restarts once no other job is in hand."""
        self._abandoned.update(job_ids)
        self.shutdown("restart for a fresh worker", EXIT_RESTART)

    async def _ping_loop(self) -> None:
        while True:
            try:
                # An abandoned handler still runs: listed, this worker counts as busy.
                await self._client.ping([*self._jobs.ids(), *sorted(self._abandoned)])
            except GatewayError as err:
                _report("ping", err, self._config.ping_interval_s)
            await asyncio.sleep(self._config.ping_interval_s)

    @property
    def abandoned(self) -> bool:
        """Whether a sync handler was left running in its thread."""
        return bool(self._abandoned)

    # -- process plumbing

    def _spawn(self, loop: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(loop)
        task.add_done_callback(self._loop_ended)
        return task

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("worker loop %s crashed", task.get_coro(), exc_info=task.exception())
            self.shutdown("a worker loop crashed", EXIT_LOOP_FAILED)

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, self._on_signal, signum)
            except (NotImplementedError, RuntimeError, ValueError):
                log.warning("cannot handle %s here; it ends the worker at once", signum.name)

    def _on_signal(self, signum: signal.Signals) -> None:
        if self._signalled and signum == signal.SIGINT:
            log.warning("second SIGINT: exiting now, abandoning %d job(s)", len(self._jobs))
            exit_now(EXIT_INTERRUPTED)
        self._signalled = True
        if self._exit_code == EXIT_RESTART:
            self._exit_code = EXIT_OK  # told to end: a pending restart is called off
        self.shutdown(f"{signum.name} received")


def restart_now(worker_id: str) -> None:
    """Replace this process with a fresh run of its own command line: same pid, same worker
    id, and no abandoned handler thread (threads do not survive exec). Returns only if that
    failed."""
    log.warning("worker %s restarting: %s", worker_id, shlex.join(sys.orig_argv))
    os.environ["LOCKGATE_WORKER_ID"] = worker_id  # a generated id is kept too
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError as err:
        log.error("cannot restart: %s", err)


def exit_now(status: int) -> None:
    """End the process at once, even with handler threads still running."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _report(call: str, err: GatewayError, retry_in_s: float) -> None:
    if isinstance(err, AuthError):
        log.error("%s refused: %s; retrying in %.1f s", call, err, retry_in_s)
    else:
        log.warning("%s failed: %s; retrying in %.1f s", call, err, retry_in_s)


def _report_outcome(job_id: str, outcome: handlers.Outcome, took_s: float) -> None:
    state = "failed" if outcome.failed else "completed"
    detail = f": {outcome.body['error']}" if outcome.failed else ""
    log.info("job %s %s in %.0f ms%s", job_id, state, took_s * 1000, detail)
