"""Dev mode's canary: a completed build tested before it takes traffic (issue 48, item 3).

A build whose checkout has `tests.json` (`.runpod/tests.json` over the root's) is TESTING
before it may be COMPLETED (`dev.builder`). One worker process runs the new checkout beside
the serving ones, as the only worker of a hidden endpoint of its own, `canary-<build>`: a
registry entry (origin `canary`) the control plane never lists, so the gateway's job path
and worker API serve it as any endpoint of its type. Each test's input is a job of that
endpoint, submitted through the gateway's job API (`POST …/run`, `GET …/status`:
`hub_tests.run_test`), or on a load-balancing endpoint an HTTP request through its
load-balancing route (`/lb/canary-…/<path>`: `gateway.lb_tests.run_lb_test`), with a key
for that endpoint alone: one loop, two ways to run a test (`test_runner`). So the serving
workers never get a test, the canary never gets a user's job or request, and the
endpoint's jobs, request metrics and history never count a test. The first failed test
ends the tests. The canary's worker, its entry, keys, jobs and history are removed either
way; what it printed is in the build's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp

from lockgate.dev.hub_tests import WAIT_STEP_MS, CaseResult, failed_test, result_line, run_test
from lockgate.gateway.lb_tests import run_lb_test
from lockgate.manage.logbook import LineSink
from lockgate.manage.workerlogs import CONTAINER, SYSTEM
from lockgate.models.build import FailedTest
from lockgate.models.canary import canary_id, canary_spec
from lockgate.models.crashloop import CrashLoop
from lockgate.models.endpoint import EndpointSpec, EndpointType
from lockgate.models.hub import HubTest, HubTests
from lockgate.models.registry_entry import RegistryEntry
from lockgate.store import JobStore, Registry, key_digest

log = logging.getLogger("lockgate.dev.canary")

__all__ = ["canary_entry", "canary_id", "canary_spec", "is_canary", "run_canary", "test_runner"]

CANARY_ORIGIN = "canary"  # a registry entry's origin: a build's canary, never resumed
STOP_GRACE_S = 5.0  # the canary holds no job once its tests ended (a late one is cancelled)
LOOP_POLL_S = 0.5  # how often a test's wait looks whether the canary failed to start
LOG_BACKLOG = 1000  # canary lines waiting for the build's log; past it they are dropped

Say = Callable[[str, str], Awaitable[None]]  # (log source, line) into the build's log
RunTest = Callable[[HubTest], Awaitable[CaseResult]]  # one test, run against the canary


class Workers(Protocol):
    """The canary's worker pool (`dev.workers.LocalWorkers`), as far as it is used here."""

    loop: CrashLoop | None  # set once its worker failed to start (`scaling.crashloop`)

    async def stop(self, grace_s: float) -> None: ...


# Starts the canary's worker pool: (canary endpoint id, its spec, where its lines go).
StartWorkers = Callable[[str, EndpointSpec, LineSink], Workers]


def canary_entry(canary: str, spec: EndpointSpec, job_api_url: str) -> RegistryEntry:
    """The canary endpoint's registry entry: the endpoint's settings (its execution
    timeout, its policies) under the canary's id, origin `canary`."""
    return RegistryEntry(
        id=canary, jobApiUrl=job_api_url, origin=CANARY_ORIGIN, **spec.model_dump(mode="json")
    )


class BuildLogLines:
    """The canary worker's output into the build's log (`container` lines, in order)."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.queue: asyncio.Queue[str] = asyncio.Queue(LOG_BACKLOG)
        self.task = asyncio.create_task(self._drain(), name="lockgate-canary-log")

    def sink(self, worker_id: str, stream: str, line: str | None) -> None:
        """A `LineSink`: a line the worker wrote (`None` at its end: nothing)."""
        if line is not None:
            with contextlib.suppress(asyncio.QueueFull):  # a flood: the rest is dropped
                self.queue.put_nowait(f"canary {worker_id}: {line}")

    async def _drain(self) -> None:
        while True:
            line = await self.queue.get()
            await self.say(CONTAINER, line)
            self.queue.task_done()

    async def close(self) -> None:
        """Write what is waiting, then stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.queue.join()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def run_canary(
    registry: Registry,
    jobs: JobStore,
    gateway_url: str,
    build_id: str,
    spec: EndpointSpec,
    tests: HubTests,
    start: StartWorkers,
    say: Say,
) -> FailedTest | None:
    """Run `tests` against one canary worker of the build (`start` starts it); the first
    test that failed and why, None when all passed. Everything of the canary is gone when
    this returns (or is cancelled)."""
    canary = canary_id(build_id)
    job_api = f"{gateway_url.rstrip('/')}/v2/{canary}"  # its entry's (the job API's) URL
    key = f"lg_{secrets.token_urlsafe(24)}"
    spec = canary_spec(spec)
    await registry.put_endpoint(canary, canary_entry(canary, spec, job_api))
    await registry.put_key(
        key, {"name": f"canary:{build_id}", "scopes": ["jobs"], "endpoints": [canary]}
    )
    lines = BuildLogLines(say)
    workers: Workers | None = None
    try:
        workers = start(canary, spec, lines.sink)
        await say(SYSTEM, f"testing on a canary worker ({canary}): {len(tests.tests)} test(s)")
        timeout = aiohttp.ClientTimeout(total=WAIT_STEP_MS / 1000 + 60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            run = test_runner(session, gateway_url, canary, spec, {"authorization": key})
            for test in tests.tests:
                result = await unless_crashed(run(test), workers)
                if result is None:  # the canary failed to start: the rest would too
                    assert workers.loop is not None
                    why = f"the canary worker did not start: {workers.loop.text()}"
                    await say(SYSTEM, f"test {test.name!r} FAILED: {why}")
                    return FailedTest(name=test.name, reason=why)
                await say(SYSTEM, result_line(result))
                if (failed := failed_test(test, result)) is not None:
                    return failed
        await say(SYSTEM, f"tests: all {len(tests.tests)} passed")
        return None
    finally:
        await remove_canary(registry, jobs, canary, key, workers, lines)


def test_runner(
    session: aiohttp.ClientSession,
    gateway_url: str,
    canary: str,
    spec: EndpointSpec,
    headers: dict[str, str],
) -> RunTest:
    """How a test runs on the canary: a job through its job API, or on a load-balancing
    endpoint an HTTP request through its load-balancing route."""
    base = gateway_url.rstrip("/")
    if spec.type == EndpointType.LB:
        return functools.partial(run_lb_test, session, f"{base}/lb/{canary}", headers)
    return functools.partial(run_test, session, f"{base}/v2/{canary}", headers)


async def unless_crashed(ran: Awaitable[CaseResult], workers: Workers) -> CaseResult | None:
    """The test's result; None (the test stopped) when the canary fails to start first."""
    test = asyncio.ensure_future(ran)
    try:
        while not test.done() and workers.loop is None:
            await asyncio.wait([test], timeout=LOOP_POLL_S)
        return test.result() if test.done() else None
    finally:
        test.cancel()


async def remove_canary(
    registry: Registry,
    jobs: JobStore,
    canary: str,
    key: str | None = None,
    workers: Workers | None = None,
    lines: BuildLogLines | None = None,
) -> None:
    """Stop the canary's worker, then remove its entry, key, jobs and history (also a
    leftover canary of an earlier run: `key`, `workers` and `lines` None)."""
    if workers is not None:
        await workers.stop(STOP_GRACE_S)
    if lines is not None:
        await lines.close()
    await registry.delete_endpoint(canary)
    if key is not None:
        await registry.delete_key(key_digest(key))
    await jobs.delete_endpoint_data(canary)


def is_canary(entry: RegistryEntry) -> bool:
    """Whether a registry entry is a build's canary (not an endpoint of anyone's)."""
    return entry.origin == CANARY_ORIGIN
