"""A cluster's canary: a completed build tested before it takes traffic (issue 48, item 3;
docs/builds.md, "Tested before it takes traffic").

When a build Job completes and its clone handed over a `tests.json` (`kube.buildjobs`),
the build is TESTING (`kube.builds`) and `Canaries.start` runs its tests in a task of
this process:

1. the canary: an `Endpoint` object of its own, `canary-<the build id's random part>`, in
   the endpoint's namespace (`canary_endpoint`): the endpoint's settings with one worker
   exactly (`models.canary.canary_spec`), the build to run in its
   `BUILD_ANNOTATION` (so its worker Deployment runs `imageName@imageDigest`), the tests
   in `TESTS_ANNOTATION`, labelled `CANARY_OF_LABEL` (the management lists leave it out)
   and owned by the endpoint (garbage-collected with it). The operator reconciles it as
   any Endpoint: Deployment, worker key, registry entry; the scaler keeps its one worker.
   When tests.json has a `config.env`, the canary gets a Template of its own of the same
   name (`canary_template`): the endpoint's with that env over its env, labelled as the
   canary (the management API neither lists nor reads it) and owned by the canary
   Endpoint; the canary's `templateId` names it. Without one it uses the endpoint's;
2. each test's input is a job of the canary endpoint, submitted and followed with the
   store's own functions (`JobStore.submit`, `get`, `cancel`: the gateway's job path)
   within the test's timeout; it passes when the job is COMPLETED (`models.verdicts`, the
   rule of `lockgate dev --test`). A load-balancing endpoint's test is an HTTP request
   through the gateway's load-balancing route instead (`gateway.lb_tests`, to
   `settings.gateway_url` with a key for the canary alone), passed on HTTP 200. One loop
   runs the tests (`_tests`), with one of those two ways to run one (`_runner`). The first
   failure ends the tests; a canary in a crash loop (its registry entry's `crashLoop`)
   fails the test at once;
3. all passed: COMPLETED, and the endpoint is touched so that its reconcile takes the
   build; else TEST_FAILED naming the test. The canary Endpoint and its Template are
   deleted either way.

An operator restarted while a build is TESTING runs its tests again from the start
(`Canaries.ensure`, at each reconcile of the endpoint): the canary Endpoint, which holds
the tests and the build, is still there (its Template made again if it is not); its jobs
queued by the earlier run are purged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from lockgate.gateway.lb_tests import run_lb_test
from lockgate.kube.cluster import ClusterError, Conflict, NotFound
from lockgate.kube.controlplane import (
    BUILD_ANNOTATION,
    BUILDS_ANNOTATION,
    CANARY_OF_LABEL,
    running_build_of,
    spec_from_resource,
    template_from_resource,
)
from lockgate.kube.crds import ENDPOINT, GROUP, TEMPLATE, VERSION, omit_empty_strings
from lockgate.manage.workerlogs import SYSTEM
from lockgate.models.build import Build, BuildStatus, FailedTest, IllegalTransition, rfc3339
from lockgate.models.canary import canary_id, canary_spec, canary_template
from lockgate.models.endpoint import EndpointType
from lockgate.models.hub import HubFileError, HubTest, HubTests, env_for_tests, parse_tests
from lockgate.models.jobs import FINAL_STATES, TTL_DEFAULT_MS, JobStatus
from lockgate.models.running_build import RunningBuild
from lockgate.models.source import BuildTrigger, source_of
from lockgate.models.verdicts import (
    CaseResult,
    failed_test,
    failed_test_error,
    failure_detail,
    result_line,
    unanswered,
)
from lockgate.store import JobStore, NewJob, Registry, key_digest
from lockgate.store.builds import BuildNotFound, BuildStore
from lockgate.store.keys import new_job_id

if TYPE_CHECKING:
    from lockgate.kube.cluster import Cluster

log = logging.getLogger(__name__)

TESTS_ANNOTATION = f"{GROUP}/tests"  # on a canary Endpoint: the tests.json text it runs
POLL_S = 0.5  # how often a test's job, the canary's crash loop and the build are read

CANCEL_S = 5.0  # at most this to cancel a test's job when its test stops
KEY_NAME = "canary:{build_id}"  # the name of the key a load-balancing canary's tests use

Obj = dict[str, Any]
Say = Callable[[str], Awaitable[None]]
RunTest = Callable[[HubTest], Awaitable[CaseResult]]  # one test, run against the canary


def is_canary_of(obj: Obj, endpoint_id: str, build_id: str) -> bool:
    """Whether an Endpoint object is the canary of this endpoint's build."""
    meta = obj.get("metadata") or {}
    running = running_build_of(obj)
    return (meta.get("labels") or {}).get(CANARY_OF_LABEL) == endpoint_id and (
        running is not None and running.buildId == build_id
    )


def running_of_testing(build: Build, url: str) -> RunningBuild | None:
    """What the canary runs: the build's `imageName@imageDigest` (None without both)."""
    if not build.imageName or not build.imageDigest:
        return None
    name = build.imageName.rsplit("@", 1)[0]
    return RunningBuild(buildId=build.id, url=url, image=f"{name}@{build.imageDigest}")


def owner_reference(owner: Obj) -> Obj:
    """An owner reference to an Endpoint object (its dependant deleted with it)."""
    meta = owner["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": ENDPOINT.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
    }


def canary_endpoint(
    parent: Obj, running: RunningBuild, tests_text: str, *, own_template: bool = False
) -> Obj:
    """The canary `Endpoint` of the build `running` names, for the endpoint `parent` (its
    object as the API server has it); `own_template`: it runs the Template of its own name
    (`canary_template`), else the endpoint's."""
    meta = parent["metadata"]
    spec = canary_spec(spec_from_resource(parent))
    update: dict[str, Any] = {"templateId": canary_id(running.buildId)} if own_template else {}
    if spec.source is not None:  # kept (the running build applies to its URL), built never
        update["source"] = spec.source.model_copy(
            update={"git": spec.source.git.model_copy(update={"trigger": BuildTrigger.MANUAL})}
        )
    spec = spec.model_copy(update=update)
    body = {k: v for k, v in spec.model_dump(mode="json").items() if v is not None}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": ENDPOINT.kind,
        "metadata": {
            "name": canary_id(running.buildId),
            "namespace": meta["namespace"],
            "labels": {CANARY_OF_LABEL: meta["name"]},
            "annotations": {BUILD_ANNOTATION: running.encoded(), TESTS_ANNOTATION: tests_text},
            "ownerReferences": [owner_reference(parent)],
        },
        "spec": omit_empty_strings(body),
    }


def canary_template_object(template: Obj, canary: Obj, env: dict[str, str]) -> Obj:
    """The canary's own Template (named as the canary): the endpoint's `template` (its
    object) with tests.json's `env` over its env, labelled as the canary and owned by the
    canary Endpoint `canary` (its object as created), so deleted with it."""
    meta = canary["metadata"]
    spec = canary_template(template_from_resource(template), env)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": TEMPLATE.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {CANARY_OF_LABEL: meta["labels"][CANARY_OF_LABEL]},
            "ownerReferences": [owner_reference(canary)],
        },
        "spec": omit_empty_strings(spec.model_dump(mode="json")),
    }


def is_canary_template(obj: Obj, canary: str, endpoint_id: str) -> bool:
    """Whether a Template is the one made for the canary Endpoint `canary` of the
    endpoint (never a user's Template of that name)."""
    meta = obj.get("metadata") or {}
    owners = {(o.get("kind"), o.get("name")) for o in meta.get("ownerReferences") or []}
    of = (meta.get("labels") or {}).get(CANARY_OF_LABEL)
    return of == endpoint_id and (ENDPOINT.kind, canary) in owners


def job_of_test(test: HubTest) -> NewJob:
    """A test's input as a job of the canary endpoint."""
    return NewJob(id=new_job_id(), input=json.dumps(test.input).encode(), ttl_ms=TTL_DEFAULT_MS)


def record_body(status: str, output: bytes | None, error: str | None) -> dict[str, Any]:
    """A final job's record as the status body `models.verdicts.failure_detail` reads."""
    body: dict[str, Any] = {"status": status, "error": error}
    if output is not None:
        with contextlib.suppress(ValueError):
            body["output"] = json.loads(output)
    return body


class BuildEnded(Exception):
    """The build under test ended meanwhile (cancelled, or deleted): no verdict."""


class Canaries:
    """The canaries of this process's builds under test, one task per TESTING build."""

    def __init__(
        self,
        cluster: Cluster,
        store: BuildStore,
        registry: Registry,
        jobs: JobStore,
        gateway_url: str,
    ) -> None:
        self.cluster, self.store, self.registry, self.jobs = cluster, store, registry, jobs
        self.gateway_url = gateway_url.rstrip("/")  # a load-balancing canary's tests go there
        self.tasks: dict[str, asyncio.Task[None]] = {}
        # After `stop`, no test starts: a reconcile still running while kopf stops would
        # otherwise start one that outlives the stop (and may delete the canary a
        # restarted operator resumes on).
        self.stopped = False

    def testing(self, build_id: str) -> bool:
        """Whether this process runs the build's tests now."""
        task = self.tasks.get(build_id)
        return task is not None and not task.done()

    def start(self, namespace: str, endpoint_id: str, build: Build, tests_text: str | None) -> None:
        """Test the TESTING `build` of the endpoint on a canary, in a task (its end
        written on the build). `tests_text` None: resumed, the canary already made.
        Nothing starts once the operator is stopping (`stop`): its next start resumes."""
        if self.stopped or self.testing(build.id):
            return
        if tests_text is None:
            log.info("build %s of %s: TESTING with no test running; again", build.id, endpoint_id)
        run = self._run(namespace, endpoint_id, build, tests_text)
        self.tasks[build.id] = asyncio.create_task(run, name=f"lockgate-canary-{build.id}")

    async def ensure(self, namespace: str, endpoint_id: str, build: Build) -> None:
        """A TESTING build no task of this process tests (the operator restarted): its
        tests run again on its canary. Called under the build's lock (`kube.builds`)."""
        self.start(namespace, endpoint_id, build, None)

    async def stop(self) -> None:
        """Cancel the tests running (the operator stopping): resumed at its next start."""
        self.stopped = True
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _say(self, endpoint_id: str, build_id: str, line: str) -> None:
        with contextlib.suppress(BuildNotFound):  # deleted with its endpoint meanwhile
            await self.store.log(endpoint_id, build_id, SYSTEM, [line])

    async def _run(
        self, namespace: str, endpoint_id: str, build: Build, tests_text: str | None
    ) -> None:
        name = canary_id(build.id)

        async def say(line: str) -> None:
            await self._say(endpoint_id, build.id, line)

        stopping = False
        try:
            made = await self._canary(namespace, endpoint_id, build, tests_text, say)
            if made is not None:
                tests, kind = made
                failed = await self._tests(endpoint_id, build.id, name, tests, kind, say)
                await self._end(namespace, endpoint_id, build.id, failed, say)
        except BuildEnded:
            await say("tests stopped: the build ended meanwhile")
        except asyncio.CancelledError:
            stopping = True  # the operator stopping: the canary stays, its next start resumes
            raise
        except Exception as err:  # a bug or an API server's refusal must not vanish in a task
            log.exception("tests of build %s of %s", build.id, endpoint_id)
            await self._fail(endpoint_id, build.id, BuildStatus.FAILED, f"testing failed: {err}")
        finally:
            self.tasks.pop(build.id, None)
            if not stopping:
                await self._delete(namespace, name, endpoint_id, build.id, say)

    async def _canary(
        self, namespace: str, endpoint_id: str, build: Build, tests_text: str | None, say: Say
    ) -> tuple[HubTests, EndpointType] | None:
        """Make the canary Endpoint (or find it, resumed); the tests it runs and the
        endpoint's type (None: the build ended, the endpoint or the canary gone)."""
        name = canary_id(build.id)
        if tests_text is None:  # resumed
            found = await self.cluster.get_endpoint(namespace, name)
            if found is None or not is_canary_of(found, endpoint_id, build.id):
                why = (
                    "the operator restarted while testing and its canary is gone; "
                    "start the build again"
                )
                await self._fail(endpoint_id, build.id, BuildStatus.TEST_FAILED, why)
                return None
            tests = parse_tests(found["metadata"]["annotations"][TESTS_ANNOTATION])
            if not await self._template(namespace, endpoint_id, build.id, found, tests):
                return None
            await self.jobs.purge(name)  # the earlier run's test jobs
            await say(f"the operator restarted while testing: the tests run again on {name}")
            return tests, spec_from_resource(found).type
        parent = await self.cluster.get_endpoint(namespace, endpoint_id)
        source = source_of((parent or {}).get("spec", {}).get("source"))
        running = running_of_testing(build, source.git.url) if source else None
        if parent is None or running is None:
            await self._fail(endpoint_id, build.id, BuildStatus.FAILED, "the endpoint is gone")
            return None
        tests = parse_tests(tests_text)
        own = bool(env_for_tests(tests))  # tests.json's `config.env`: a Template of its own
        wanted = canary_endpoint(parent, running, tests_text, own_template=own)
        try:
            made: Obj | None = await self.cluster.create_endpoint(namespace, wanted)
        except Conflict:  # made by an earlier run, or a user's endpoint of that name
            made = await self.cluster.get_endpoint(namespace, name)
            if made is not None and not is_canary_of(made, endpoint_id, build.id):
                why = f"an endpoint named {name} exists, not this build's canary"
                await self._fail(endpoint_id, build.id, BuildStatus.FAILED, why)
                return None
        if made is None:  # deleted meanwhile (its endpoint was)
            await self._fail(endpoint_id, build.id, BuildStatus.FAILED, "the endpoint is gone")
            return None
        if not await self._template(namespace, endpoint_id, build.id, made, tests, parent):
            return None
        await say(
            f"testing on a canary worker ({name}, {running.image}): {len(tests.tests)} test(s)"
        )
        return tests, spec_from_resource(parent).type

    async def _template(
        self, namespace: str, endpoint_id: str, build_id: str, canary: Obj, tests: HubTests,
        parent: Obj | None = None,
    ) -> bool:  # fmt: skip
        """Make the canary's own Template when it names one (tests.json has a `config.env`):
        the endpoint's (`parent`, read when not given) with that env over its env; one this
        canary's already there is kept. False: it cannot be made (the build FAILED)."""
        name = canary["metadata"]["name"]
        if (canary.get("spec") or {}).get("templateId") != name:
            return True  # the endpoint's Template: nothing of its own
        if parent is None:
            parent = await self.cluster.get_endpoint(namespace, endpoint_id)
        template_id = ((parent or {}).get("spec") or {}).get("templateId") or ""
        base = await self.cluster.get_template(namespace, template_id) if template_id else None
        why = f"the endpoint's template {template_id!r} is not found"
        if base is not None:
            body = canary_template_object(base, canary, env_for_tests(tests))
            try:
                await self.cluster.create_template(namespace, body)
                return True
            except Conflict:  # made by an earlier run, or a user's Template of that name
                found = await self.cluster.get_template(namespace, name)
                if found is not None and is_canary_template(found, name, endpoint_id):
                    return True
                why = f"a template named {name} exists, not this build's canary's"
        await self._fail(endpoint_id, build_id, BuildStatus.FAILED, why)
        return False

    async def _tests(
        self, endpoint_id: str, build_id: str, canary: str, tests: HubTests,
        kind: EndpointType, say: Say,
    ) -> FailedTest | None:  # fmt: skip
        """Run the tests in order; the first that failed and why (None: all passed)."""
        async with self._runner(build_id, canary, kind) as run:
            for test in tests.tests:
                result = await self._test(endpoint_id, build_id, canary, test, run)
                if isinstance(result, FailedTest):
                    await say(f"test {test.name!r} FAILED: {result.reason}")
                    return result
                await say(result_line(result))
                if (failed := failed_test(test, result)) is not None:
                    return failed
        await say(f"tests: all {len(tests.tests)} passed")
        return None

    @contextlib.asynccontextmanager
    async def _runner(
        self, build_id: str, canary: str, kind: EndpointType
    ) -> AsyncIterator[RunTest]:
        """How a test runs on the canary: a job of it (`_job_test`), or on a
        load-balancing endpoint an HTTP request through the gateway's load-balancing
        route, with a key made for the canary alone (deleted after the tests; one left by
        an operator stopped mid-test is deleted at the next run)."""
        if kind != EndpointType.LB:
            yield functools.partial(self._job_test, canary)
            return
        name = KEY_NAME.format(build_id=build_id)
        for digest, record in (await self.registry.list_keys()).items():
            if record.get("name") == name:
                await self.registry.delete_key(digest)
        key = f"lg_{secrets.token_urlsafe(24)}"
        await self.registry.put_key(key, {"name": name, "scopes": ["jobs"], "endpoints": [canary]})
        try:
            async with aiohttp.ClientSession() as session:
                url, headers = f"{self.gateway_url}/lb/{canary}", {"authorization": key}
                yield functools.partial(
                    self._lb_test, functools.partial(run_lb_test, session, url, headers), canary
                )
        finally:
            with contextlib.suppress(Exception):
                await self.registry.delete_key(key_digest(key))

    async def _test(
        self, endpoint_id: str, build_id: str, canary: str, test: HubTest, run: RunTest
    ) -> CaseResult | FailedTest:
        """One test run by `run`, watched: a FailedTest when the canary crash-loops;
        BuildEnded when the build ended meanwhile (cancelled). The test stops either way."""
        ran = asyncio.ensure_future(run(test))
        try:
            while True:
                await asyncio.wait([ran], timeout=POLL_S)
                if ran.done():
                    return ran.result()
                entry = await self.registry.get_endpoint(canary)
                if entry is not None and entry.crashLoop is not None:
                    why = f"the canary worker did not start: {entry.crashLoop.text()}"
                    return FailedTest(name=test.name, reason=why)
                try:
                    ended = (await self.store.get(endpoint_id, build_id)).terminal
                except BuildNotFound:
                    ended = True
                if ended:
                    raise BuildEnded(build_id)
        finally:
            if not ran.done():
                ran.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ran

    async def _lb_test(self, send: RunTest, canary: str, test: HubTest) -> CaseResult:
        """A test `send`s through the load-balancing route once the canary is registered
        (its reconcile writes its registry entry: the route knows no endpoint before),
        all within the test's time."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while await self.registry.get_endpoint(canary) is None:
            if loop.time() - started >= test.timeout_s:
                return unanswered(test, loop.time() - started)
            await asyncio.sleep(POLL_S)
        left_ms = max(1, int((test.timeout_s - (loop.time() - started)) * 1000))
        result = await send(test.model_copy(update={"timeout": left_ms}))
        return dataclasses.replace(result, seconds=loop.time() - started)

    async def _job_test(self, canary: str, test: HubTest) -> CaseResult:
        """A test as a job of the canary, followed until final or out of its time (then
        cancelled, as it is when the test stops)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + test.timeout_s
        job_id, _ = await self.jobs.submit(canary, job_of_test(test))

        def result(status: str, detail: str = "", out_of_time: bool = False) -> CaseResult:
            took = loop.time() - started
            passed = status == JobStatus.COMPLETED
            return CaseResult(test.name, passed, status, detail, took, out_of_time)

        try:
            while True:
                record = await self.jobs.get(canary, job_id)
                if record.status in FINAL_STATES:
                    body = record_body(record.status, record.output, record.error)
                    return result(record.status, failure_detail(body))
                if loop.time() >= deadline:
                    await self._cancel_job(canary, job_id)
                    why = f"not final within {test.timeout_s:g} s; cancelled"
                    return result("TIMED_OUT", why, out_of_time=True)
                await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))
        except asyncio.CancelledError:
            await self._cancel_job(canary, job_id)
            raise

    async def _cancel_job(self, canary: str, job_id: str) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CANCEL_S):
                await self.jobs.cancel(canary, job_id)

    async def _end(
        self, namespace: str, endpoint_id: str, build_id: str, failed: FailedTest | None, say: Say
    ) -> None:
        """The verdict on the build: COMPLETED (the endpoint touched: its reconcile takes
        the build) or TEST_FAILED naming the test."""
        if failed is not None:
            why = failed_test_error(failed)
            await self._fail(endpoint_id, build_id, BuildStatus.TEST_FAILED, why, failedTest=failed)
            return
        try:
            await self.store.change(endpoint_id, build_id, BuildStatus.COMPLETED)
        except (IllegalTransition, BuildNotFound):
            return  # cancelled meanwhile
        await say("build COMPLETED: its tests passed")
        patch = {"metadata": {"annotations": {BUILDS_ANNOTATION: rfc3339()}}}
        try:
            await self.cluster.patch_endpoint(namespace, endpoint_id, patch)
        except ClusterError as err:  # the resync takes it anyway
            if not isinstance(err, NotFound):
                log.warning("endpoint %s not told of its tested build: %s", endpoint_id, err)

    async def _fail(
        self, endpoint_id: str, build_id: str, status: BuildStatus, why: str, **fields: Any
    ) -> None:
        try:
            await self.store.change(endpoint_id, build_id, status, error=why, **fields)
        except (IllegalTransition, BuildNotFound):
            return
        await self._say(endpoint_id, build_id, f"build {status.value}: {why}")

    async def _delete(
        self, namespace: str, name: str, endpoint_id: str, build_id: str, say: Say
    ) -> None:
        """Delete the build's canary and its Template (only them: never an endpoint or a
        template of that name that is not). The Template goes by its owner reference too;
        deleted here as well, so that nothing waits for the garbage collector."""
        deleted = False
        try:
            found = await self.cluster.get_endpoint(namespace, name)
            if found is not None and is_canary_of(found, endpoint_id, build_id):
                await self.cluster.delete_endpoint(namespace, name)
                deleted = True
        except NotFound:
            pass
        except ClusterError as err:
            log.warning("canary %s not deleted: %s", name, err)
        try:
            template = await self.cluster.get_template(namespace, name)
            if template is not None and is_canary_template(template, name, endpoint_id):
                await self.cluster.delete_template(namespace, name)
        except NotFound:
            pass
        except ClusterError as err:
            log.warning("the template of canary %s not deleted: %s", name, err)
        if deleted:
            with contextlib.suppress(Exception):
                await say(f"canary {name} deleted")


def unusable_tests(text: str) -> str | None:
    """Why a handed-over tests.json cannot be run (None: it can): the build FAILS."""
    try:
        parse_tests(text)
    except HubFileError as err:
        return str(err)
    return None
