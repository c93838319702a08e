"""Fitness checks: the runpod SDK's contract (>= 1.11), for lockgate's runtime.

A check is a function (sync or async) registered with `register_fitness_check`; it fails by
raising. Before the worker's heartbeat and job loop start, the registered checks run once,
in registration order, then the automatic ones (`system_checks`). The first failure is
logged (`Fitness check failed: <name> | <ExcType>: <msg>`), reported to the gateway in one
`GET <ping URL>?status=unhealthy&check=<name>&reason=<text>` (2 s at most, any error
swallowed), and the process exits at once with code 1 (`os._exit`: nothing may hold the
exit, not even a live non-daemon thread). Local test runs (`--test_input`) run no checks.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn

from .config import WorkerConfig
from .http import HttpClient
from .logs import log

FitnessCheck = Callable[[], Any] | Callable[[], Awaitable[Any]]

REPORT_TIMEOUT_S = 2.0  # how long the unhealthy report may delay the exit (the SDK's)
REASON_CHARS = 256  # how much of the reason is sent (the SDK's)
EXIT_UNHEALTHY = 1

_registered: list[FitnessCheck] = []


def register_fitness_check(check: FitnessCheck) -> FitnessCheck:
    """Register `check` (sync or async; it fails by raising) to run once before the worker
    takes its first job; returns it unchanged, as `runpod.serverless.register_fitness_check`."""
    _registered.append(check)
    log.debug("registered fitness check %s", check_name(check))
    return check


def registered() -> list[FitnessCheck]:
    """The checks registered so far, in registration order."""
    return list(_registered)


def check_name(check: Callable[..., Any]) -> str:
    """The name a check is reported by: its function's `__name__` (a partial's function's)."""
    function = getattr(check, "func", check)  # functools.partial
    return getattr(function, "__name__", None) or type(check).__name__


def failure_reason(err: BaseException) -> str:
    """`<ExcType>: <message>`, as the SDK words a failed check."""
    return f"{type(err).__name__}: {err}"


async def first_failure(checks: Sequence[FitnessCheck]) -> tuple[str, str] | None:
    """Run `checks` in order until one raises: its name and reason, or None if all pass."""
    if not checks:
        return None
    log.info("running %d fitness check(s)", len(checks))
    started = time.perf_counter()
    for check in checks:
        name = check_name(check)
        try:
            result = check()
            if inspect.isawaitable(result):
                await result
        except Exception as err:
            return name, failure_reason(err)
        log.debug("fitness check passed: %s", name)
    log.info("all fitness checks passed (%.0f ms)", (time.perf_counter() - started) * 1000)
    return None


def report_params(check: str, reason: str) -> dict[str, str]:
    """The unhealthy report's query, as the runpod SDK sends it."""
    return {"status": "unhealthy", "check": check, "reason": reason[:REASON_CHARS]}


async def report_unhealthy(config: WorkerConfig, check: str, reason: str) -> None:
    """Tell the gateway this worker failed `check` (one GET to its ping URL, at most
    `REPORT_TIMEOUT_S`); skipped without a ping URL or key, any failure swallowed."""
    if not config.ping_url or not config.worker_key:
        return
    client = HttpClient({"Authorization": config.worker_key})
    try:
        params = report_params(check, reason)
        await client.request("GET", config.ping_url, params=params, timeout_s=REPORT_TIMEOUT_S)
    except Exception as err:  # the exit is the guarantee, not the report
        log.debug("unhealthy report not sent: %r", err)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def run_fitness_checks(config: WorkerConfig, env: Mapping[str, str] = os.environ) -> None:
    """Run the registered checks, then the automatic ones `env` leaves on; on the first
    failure report it and exit the process with code 1 (never returns then)."""
    from .system_checks import automatic_checks  # its probes only when checks run

    failed = await first_failure([*registered(), *automatic_checks(env)])
    if failed is None:
        return
    name, reason = failed
    log.error("Fitness check failed: %s | %s", name, reason)
    await report_unhealthy(config, name, reason)
    log.error("Worker is unhealthy, exiting.")
    terminate(EXIT_UNHEALTHY)


def terminate(code: int) -> NoReturn:
    """Flush the logs and exit at once (`os._exit`: no thread or cleanup may hold it)."""
    for handler in log.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
