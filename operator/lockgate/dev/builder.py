"""Dev mode's builder: a build of a git source is a checkout at its ref and the checkout's
environment (`dev.gitsource`: a cached clone, a virtual environment keyed by its
requirements), with no image. One build runs at a time per endpoint, in order asked.

PENDING → BUILDING (the checkout, the environment, the worker's command: the repository's
`handler.py` or its Dockerfile's Python CMD; each step a `system` log line, what git and
pip say `container` lines) → COMPLETED with the commit's fields, or FAILED with the error;
past the source's `buildTimeoutMin` it is FAILED too. A completed build is a copy of its
checkout (`runs/<endpoint>/<build>`: the cached clone's work tree moves with the next
build, a running worker's files must not) and the command to run there, handed to
`on_built` (the control plane runs it; docs/builds.md). A checkout with `tests.json`
(`.runpod/` first) is TESTING first: `tester` runs its tests on a canary worker
(`dev.canary`); a failed test ends the build TEST_FAILED, naming it, and nothing is run
(an unusable tests.json: FAILED). A cancel
(`manage.builds.cancel`) marks the record first, then stops the task here: a step already
in its (daemon) thread runs to its end, unwaited, and its result is dropped; it holds
neither the cancel nor the exit of `lockgate dev`, which ends a live build FAILED.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import shutil
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path
from typing import Any, TypeVar

from lockgate.dev import gitsource
from lockgate.dev.hub_tests import failed_test_error
from lockgate.manage.workerlogs import CONTAINER, SYSTEM
from lockgate.models.build import Build, BuildStatus, FailedTest, IllegalTransition, rfc3339
from lockgate.models.hub import TESTS_FILE, HubTests, parse_tests, runpod_path
from lockgate.models.source import GitSource
from lockgate.store.builds import BuildNotFound, BuildStore

log = logging.getLogger("lockgate.dev.builder")
T = TypeVar("T")

RUNS = "runs"  # under the cache root: a folder per endpoint, one per completed build in it
RUNS_KEPT = 3  # completed builds' folders kept per endpoint (older workers may still run)


@dataclass(frozen=True, slots=True)
class Built:
    """What a completed build runs: its own copy of the checkout, and the worker command
    (the environment's python and the handler) to run in it."""

    folder: Path
    command: tuple[str, ...]
    url: str  # the repository built: a build of a source changed since is not run


# Called with the endpoint id, the COMPLETED build and what it built: the control plane
# runs it.
OnBuilt = Callable[[str, Build, Built], Awaitable[None]]
Say = Callable[[str, str], Awaitable[None]]  # (log source, line) into the build's log
# Called with the endpoint id, the TESTING build, what it built, its tests and its log:
# the first test that failed, None when all passed (the control plane's canary).
Tester = Callable[[str, Build, Built, HubTests, Say], Awaitable[FailedTest | None]]


def tests_of(folder: Path) -> HubTests | None:
    """The checkout's tests.json (`.runpod/tests.json` over the root's), None when it has
    none; HubFileError when it cannot be used."""
    path = runpod_path(folder, TESTS_FILE)
    return parse_tests(path.read_text(errors="replace")) if path is not None else None


def snapshot(checkout: gitsource.Checkout, runs: Path, build_id: str) -> gitsource.Checkout:
    """A copy of the checkout's files (not its `.git`) in `runs/<build id>`, the newest
    RUNS_KEPT such folders kept; the checkout as it is there."""
    folder = runs / build_id
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(checkout.path, folder, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    older = sorted((p for p in runs.iterdir() if p != folder), key=lambda p: p.stat().st_mtime)
    for stale in older[: max(0, len(older) - (RUNS_KEPT - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return replace(checkout, path=folder)


def commit_fields(checkout: gitsource.Checkout) -> dict[str, Any]:
    """RunPod's commit fields of a build from a checkout (`branch`: null for a tag or a
    commit, as RunPod's)."""
    return {
        "commitHash": checkout.short,
        "commit": checkout.commit,
        "commitMessage": checkout.message,
        "branch": checkout.branch,
        "commitDate": rfc3339(checkout.date.astimezone(UTC)),
    }


async def in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a daemon thread, awaited. Unlike `asyncio.to_thread`, a step still
    under way (a clone from a server that never answers, a long pip install) holds
    neither a cancel nor `lockgate dev`'s exit: it is left to end on its own."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled meanwhile: the result is dropped
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(*args), None)
        except BaseException as err:  # handed to the awaiting task
            outcome = (None, err)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=f"lockgate-build-{fn.__name__}", daemon=True).start()
    return await future


class LocalBuilder:
    """Runs dev mode's builds in tasks of this process."""

    def __init__(
        self,
        store: BuildStore,
        cache_root: Path,
        on_built: OnBuilt | None = None,
        *,
        tester: Tester | None = None,
        minute_s: float = 60.0,
    ) -> None:
        self.store = store
        self.cache_root = cache_root  # clones and environments (dev.gitsource)
        self.on_built = on_built
        self.tester = tester  # None: tests.json is not run (said in the build's log)
        self.minute_s = minute_s  # seconds in a minute of `buildTimeoutMin` (tests: fewer)
        self._tasks: dict[tuple[str, str], asyncio.Task] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def start(self, endpoint_id: str, git: GitSource, build: Build) -> None:
        """Run `build` (recorded PENDING) in the background, after the endpoint's earlier
        ones."""
        key = (endpoint_id, build.id)
        task = asyncio.create_task(
            self._run(endpoint_id, git, build), name=f"lockgate-build-{build.id}"
        )
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._tasks.pop(key, None))

    def cancel(self, endpoint_id: str, build_id: str) -> None:
        """Stop the build's task (its record says CANCELLED already)."""
        task = self._tasks.get((endpoint_id, build_id))
        if task is not None:
            task.cancel()

    def forget(self, endpoint_id: str) -> None:
        """Stop every build of a deleted endpoint."""
        for (owner, build_id), _ in list(self._tasks.items()):
            if owner == endpoint_id:
                self.cancel(owner, build_id)

    async def close(self) -> None:
        """Stop every build (dev mode shuts down): each ends FAILED, saying so."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _run(self, endpoint_id: str, git: GitSource, build: Build) -> None:
        lock = self._locks.setdefault(endpoint_id, asyncio.Lock())
        try:
            async with lock:
                await self._build(endpoint_id, git, build)
        except asyncio.CancelledError:  # cancelled (its record says so) or shutting down
            await self._end(endpoint_id, build.id, BuildStatus.FAILED, "lockgate dev stopped")
        except (BuildNotFound, IllegalTransition):
            return  # cancelled, or its endpoint deleted, meanwhile
        except Exception as err:  # a builder's bug must not vanish in a task
            log.exception("build %s of %s", build.id, endpoint_id)
            await self._end(endpoint_id, build.id, BuildStatus.FAILED, f"internal error: {err}")

    async def _build(self, endpoint_id: str, git: GitSource, build: Build) -> None:
        await self.store.change(endpoint_id, build.id, BuildStatus.BUILDING)
        ref = build.ref or git.ref or None
        say = self._say(endpoint_id, build.id)
        await say(SYSTEM, f"checking out {git.url} at {ref or 'its default branch'}")
        try:
            async with asyncio.timeout(git.buildTimeoutMin * self.minute_s):
                checkout = await in_daemon_thread(gitsource.checkout, git.url, ref, self.cache_root)
                # the commit is shown at once, and stays on a build that fails later
                await self.store.change(
                    endpoint_id, build.id, BuildStatus.BUILDING, **commit_fields(checkout)
                )
                first_line = checkout.message.partition("\n")[0]
                await say(CONTAINER, f"HEAD is now at {checkout.short} {first_line}")
                await say(SYSTEM, "preparing the environment (its requirements)")
                python = await in_daemon_thread(gitsource.environment, checkout, self.cache_root)
                await say(CONTAINER, f"environment ready: {python}")
                runs = self.cache_root / RUNS / endpoint_id
                copy = await in_daemon_thread(snapshot, checkout, runs, build.id)
                command = (str(python), *gitsource.entrypoint(copy))
                built = Built(copy.path, command, git.url)
                await say(SYSTEM, f"the workers run {shlex.join(built.command)} in {copy.path}")
                tests = tests_of(copy.path)
        except TimeoutError:
            why = f"the build took over its buildTimeoutMin ({git.buildTimeoutMin} min)"
            await self._end(endpoint_id, build.id, BuildStatus.FAILED, why)
            return
        except Exception as err:  # git or pip said no: the build's error, in one line
            await say(CONTAINER, str(err))
            await self._end(endpoint_id, build.id, BuildStatus.FAILED, str(err))
            return
        if tests is not None and not await self._tested(endpoint_id, build, built, tests, say):
            return
        done = await self.store.change(endpoint_id, build.id, BuildStatus.COMPLETED)
        await say(SYSTEM, f"build completed at {checkout.short}")
        if self.on_built is not None:
            await self.on_built(endpoint_id, done, built)

    async def _tested(
        self, endpoint_id: str, build: Build, built: Built, tests: HubTests, say: Say
    ) -> bool:
        """TESTING: whether the build passed its tests (a failure ends it TEST_FAILED)."""
        if self.tester is None:
            await say(SYSTEM, f"{TESTS_FILE}: not run here (no canary): the build is untested")
            return True
        testing = await self.store.change(endpoint_id, build.id, BuildStatus.TESTING)
        failed = await self.tester(endpoint_id, testing, built, tests, say)
        if failed is None:  # passed (or, as its log says, not run: a load-balancing one)
            return True
        why = failed_test_error(failed)
        await self._end(endpoint_id, build.id, BuildStatus.TEST_FAILED, why, failedTest=failed)
        return False

    def _say(self, endpoint_id: str, build_id: str) -> Callable[[str, str], Awaitable[None]]:
        async def say(source: str, line: str) -> None:
            await self.store.log(endpoint_id, build_id, source, line.splitlines() or [""])

        return say

    async def _end(
        self, endpoint_id: str, build_id: str, status: BuildStatus, why: str, **fields: Any
    ) -> None:
        """End a live build (a cancelled or deleted one stays as it is)."""
        try:
            await self.store.change(endpoint_id, build_id, status, error=why, **fields)
            await self.store.log(
                endpoint_id, build_id, SYSTEM, [f"build {status.value.lower()}: {why}"]
            )
        except (BuildNotFound, IllegalTransition):
            pass
