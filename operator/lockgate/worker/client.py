"""The gateway's worker API (RunPod's protocol), over kept-alive connections (`http`)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any

from . import codec
from .backoff import Backoff
from .config import WorkerConfig
from .handlers import Job, error_message
from .http import HttpClient, HttpError
from .logs import log

LONG_POLL_TIMEOUT_S = 60.0  # the gateway holds a long-poll ~20 s
CALL_TIMEOUT_S = 30.0
# A result sent with `take=1` holds its answer this long (ms) for the next job when the
# queue is empty: a worker kept busy by one client at a time needs no job-take between
# jobs. Short: a worker told to stop (SIGTERM) waits for this answer before it exits.
DONE_HOLD_MS = 500
TAKE = ("take", "wait")  # a job-done's parameters asking for the next job
TAKE_BATCH_MAX = 100  # the most jobs the gateway hands out per job-take-batch
DELIVERY_DEADLINE_S = 60.0  # how long a result or chunk is retried before it is dropped
JSON_HEADERS = {"Content-Type": "application/json"}


class GatewayError(Exception):
    """The gateway was unreachable or answered with an error status."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class AuthError(GatewayError):
    """The gateway refused the worker key (401/403)."""


class GatewayClient:
    """The worker's calls to the gateway; use as `async with GatewayClient(config) as c`."""

    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self._http: HttpClient | None = None
        # The idle token of the last job-done whose take found the queue empty: sent with
        # the next job-take, which then waits at once unless a job was queued since.
        self._idle: str | None = None
        # The last job-done answer with a job said more were queued behind it (`more`).
        self.more_queued = False

    async def __aenter__(self) -> GatewayClient:
        headers = {"Authorization": self._config.worker_key} if self._config.worker_key else {}
        self._http = HttpClient(headers)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def take(self, count: int, *, in_progress: bool) -> list[Job]:
        """Long-poll for up to `count` jobs (at most TAKE_BATCH_MAX per call); return []
        when none arrived."""
        params = {"job_in_progress": "1" if in_progress else "0"}
        if self._idle is not None:
            params["idle"], self._idle = self._idle, None
        url = self._config.take_url
        if count > 1:
            url = self._config.take_batch_url
            params["batch_size"] = str(min(count, TAKE_BATCH_MAX))
        status, data = await self._call("GET", url, params=params, timeout_s=LONG_POLL_TIMEOUT_S)
        jobs = _decode(data) if status == 200 and data else []
        return [jobs] if isinstance(jobs, dict) else _jobs_list(jobs)

    async def stop_signals(self) -> list[str]:
        """Long-poll for ids of jobs the gateway wants stopped; return [] when none."""
        url = self._config.stop_url
        status, data = await self._call("GET", url, timeout_s=LONG_POLL_TIMEOUT_S)
        answer = _decode(data) if status == 200 and data else {}
        ids = answer.get("jobsToStop") if isinstance(answer, dict) else None
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []

    async def ping(self, job_ids: Collection[str]) -> None:
        """Report that this worker is alive and which jobs it holds."""
        params = {"job_id": ",".join(job_ids)} if job_ids else None
        await self._call("GET", self._config.ping_url, params=params, timeout_s=CALL_TIMEOUT_S)

    async def stream(self, job_id: str, output: Any) -> None:
        """Send one streamed chunk; raise TypeError/ValueError if it is not JSON."""
        payload = codec.dumps({"output": output})
        url = self._config.stream_url.replace("$ID", job_id)
        await self._deliver(url, None, payload, f"stream chunk of job {job_id}")

    async def done(
        self, job_id: str, body: Mapping[str, Any], *, is_stream: bool, take: bool = False
    ) -> Job | None:
        """Send a job's result, retrying for up to a minute (logging an error if it never
        arrives); with `take`, the next job the gateway handed out in its answer, if any."""
        try:
            payload = codec.dumps(body)
        except (TypeError, ValueError) as err:
            log.error("job %s output is not JSON: %s", job_id, err)
            payload = codec.dumps({"error": error_message(err)})
        url = self._config.done_url.replace("$ID", job_id)
        params = {"isStream": "true" if is_stream else "false"}
        if take:  # the next job in the answer, waited for up to DONE_HOLD_MS
            params.update(take="1", wait=str(DONE_HOLD_MS))
        answer = await self._deliver(url, params, payload, f"result of job {job_id}")
        if answer is None:
            return None
        job, self._idle, self.more_queued = _next_job(answer) if take else (None, None, False)
        return job

    async def give_back(self, job_id: str) -> bool | None:
        """Give back a job taken ahead and never started (lockgate's gateway only): True
        when it went back to the queue, False when this worker no longer held it
        (cancelled, timed out), None when the gateway could not be asked (it stays here)."""
        url = self._config.return_url.replace("$ID", job_id)
        try:
            _, data = await self._call("POST", url, timeout_s=CALL_TIMEOUT_S)
            answer = _decode(data) if data else {}
        except GatewayError as err:
            log.warning("job %s could not be given back: %s; it runs here", job_id, err)
            return None
        return isinstance(answer, dict) and answer.get("accepted") is True

    async def _deliver(
        self, url: str, params: dict[str, str] | None, payload: bytes, what: str
    ) -> bytes | None:
        """POST `payload` until it arrives or a minute passed; the answer, or None."""
        deadline = asyncio.get_running_loop().time() + DELIVERY_DEADLINE_S
        backoff = Backoff()
        while True:
            try:
                answer = self._call(
                    "POST", url, params=params, data=payload, timeout_s=CALL_TIMEOUT_S
                )
                return (await answer)[1]
            except GatewayError as err:
                late = asyncio.get_running_loop().time() + backoff.delay_s > deadline
                if late or not err.retry:
                    log.error("%s was not delivered: %s", what, err)
                    return None
                log.warning("%s: %s; retrying in %.1f s", what, err, backoff.delay_s)
                # A job handed out in a lost answer goes back to the queue when the pings
                # do not list it; a retry asks for none, so at most one is out that way.
                params = {k: v for k, v in (params or {}).items() if k not in TAKE} or None
                await backoff.wait()

    async def _call(
        self,
        method: str,
        url: str,
        *,
        timeout_s: float,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, bytes]:
        assert self._http is not None, "use GatewayClient in `async with`"
        headers = JSON_HEADERS if data is not None else None
        try:
            status, body = await self._http.request(
                method, url, params=params, data=data, headers=headers, timeout_s=timeout_s
            )
        except (HttpError, OSError, TimeoutError) as err:
            raise GatewayError(f"{method} {url}: {err or type(err).__name__}") from err
        return _checked(method, url, status, body)


def _checked(method: str, url: str, status: int, data: bytes) -> tuple[int, bytes]:
    if status < 400:
        return status, data
    message = f"{method} {url} answered {status}: {data[:200].decode(errors='replace')}"
    if status in (401, 403):
        raise AuthError(f"{message} (is the worker key right?)")
    raise GatewayError(message, retry=status == 429 or status >= 500)


def _decode(data: bytes) -> Any:
    try:
        return codec.loads(data)
    except ValueError as err:
        raise GatewayError(f"gateway answered with invalid JSON: {err}") from err


def _next_job(answer: bytes) -> tuple[Job | None, str | None, bool]:
    """The job a job-done answer handed out (`"job"`), if any, and whether more were queued
    behind it (`"more"`); else its idle token, if any."""
    try:
        decoded = codec.loads(answer) if answer else None
    except ValueError as err:  # its job, if it had one, goes back to the queue unlisted
        log.warning("job-done answered with invalid JSON: %s", err)
        return None, None, False
    if not isinstance(decoded, dict):
        return None, None, False
    job, idle = decoded.get("job"), decoded.get("idle")
    if isinstance(job, dict):
        return job, None, decoded.get("more") is True
    return None, idle if isinstance(idle, str) and len(idle) <= 64 else None, False


def _jobs_list(jobs: Any) -> list[Job]:
    if not isinstance(jobs, list):
        raise GatewayError(f"expected a job or a list of jobs, got {type(jobs).__name__}")
    return [job for job in jobs if isinstance(job, dict)]
