"""`lockgate dev`: embedded Redis, gateway, management API and local worker pools in one
process. Every endpoint, the command line's included, is a `LocalControlPlane` endpoint.

An external Redis of any mode replaces the embedded one when `--redis-url` is given or
LOCKGATE_REDIS_URL, LOCKGATE_REDIS_CLUSTER_NODES or LOCKGATE_REDIS_SENTINELS is set: a
team's shared Redis, or a test's cluster.

`--git URL[@ref]` runs a repository's handler in a venv of its own (`dev.git_worker`);
`--test` runs tests.json against the endpoint once it is up, then stops
(`dev.hub_tests`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import shlex
import signal
import socket
import sys
from collections.abc import Collection, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from lockgate import clientconfig
from lockgate.dev.catalog import LocalCatalog
from lockgate.dev.controlplane import STOP_GRACE_S, LocalControlPlane
from lockgate.dev.datadir import (
    REDIS_PASSWORD_FILE,
    SECRETS,
    VOLUMES,
    DataDirInUse,
    claim,
    kept_secret,
    make_private,
)
from lockgate.dev.git_worker import default_cache_root, git_worker, load_tests
from lockgate.dev.gitsource import GitSourceError
from lockgate.dev.hub_tests import result_line, run_tests, summary_line
from lockgate.dev.launch import HANDLER_SUFFIX, Launch
from lockgate.dev.names import curl_line, endpoint_id_for
from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.dev.secret_values import FileSecretValues
from lockgate.dev.storage import LocalStorage
from lockgate.dev.worker_source import DevWorkers
from lockgate.gateway.app import create_app
from lockgate.gateway.lb_tests import run_lb_test
from lockgate.gateway.serving import app_runner, serve_runner
from lockgate.gateway.state import GATEWAY
from lockgate.logs import setup_logging
from lockgate.manage.about import DEV, About
from lockgate.manage.api import create_manage_app
from lockgate.manage.console import add_console, origin_of
from lockgate.manage.controlplane import UnusableSettings
from lockgate.manage.graphql import add_graphql_route
from lockgate.manage.history import HistorySampler, add_history_routes, history_sampler
from lockgate.manage.hooks_api import add_git_hook_route
from lockgate.manage.releases import Releases
from lockgate.manage.secrets import AccountSecrets
from lockgate.manage.v2 import Backends, add_v2_routes
from lockgate.manage.v2.billing import Billing
from lockgate.models import EndpointSpec, EndpointType, describe_validation_error
from lockgate.models.hub import HubFileError, HubTests
from lockgate.settings import ConsoleSettings, Prices, Settings, catalogue_of
from lockgate.store.builds import HookSecrets
from lockgate.store.connection import RedisSettings, standalone
from lockgate.store.keys import ENDPOINT_ID_RE
from lockgate.store.usage import UsageLedger

log = logging.getLogger("lockgate.dev")
T = TypeVar("T")
DEFAULT_DATA_DIR = ".lockgate"  # `lockgate dev --data-dir`'s default, relative to the cwd


@dataclass(frozen=True)
class DevOptions:
    endpoint_id: str
    spec: EndpointSpec  # templateId: the handler file or worker command (see dev.launch)
    named: frozenset[str]  # fields the command line names (its flags win over console edits)
    host: str | None  # None: LOCKGATE_HOST, else Settings' default (as `lockgate gateway`)
    port: int | None  # None: LOCKGATE_PORT, else Settings' default
    api_key: str | None  # None: the data dir's, read (or made) once the folder is ours
    data_dir: Path
    redis: RedisSettings | None = None  # an external Redis; None: start the embedded one
    launches: dict[str, Launch] = dataclasses.field(default_factory=dict)  # by templateId
    tests: HubTests | None = None  # --test: run these once the endpoint is up, then stop


def say(line: str) -> None:
    """A progress line for the person at the terminal."""
    print(f"lockgate dev | {line}", flush=True)


class Stop:
    """Ctrl-C (or SIGTERM) once: stop, letting the workers finish their jobs in hand;
    a second time: stop at once (`now`), workers killed."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.now = asyncio.Event()
        self.forced: int | None = None  # the signal that stopped it at once

    def signalled(self, signum: int) -> None:
        if not self.first.is_set():
            self.first.set()
        elif self.forced is None:
            self.forced = signum
            self.now.set()

    async def wait(self) -> None:
        await self.first.wait()

    def exit_code(self) -> int:
        """0 after a graceful stop; 128 + the signal after a forced one (130: Ctrl-C)."""
        return 0 if self.forced is None else 128 + self.forced


def stopping_line(jobs: int | None, grace_s: float) -> str:
    """The line printed at the first Ctrl-C: what the stop waits for, how long at most,
    and how to stop at once."""
    wait = f"up to {grace_s:.0f} s"
    if jobs is None:
        what = f"waiting {wait} for the jobs in hand"
    elif jobs == 0:
        what = f"no job in hand, waiting {wait} for the workers to exit"
    else:
        what = f"waiting {wait} for {jobs} job{'s' if jobs != 1 else ''} in hand"
    return f"stopping: {what}; Ctrl-C again to stop now"


async def kill_when(now: asyncio.Event, plane: LocalControlPlane) -> None:
    """At a second Ctrl-C: kill the workers, so the stop under way ends at once."""
    await now.wait()
    say("stopping now: workers killed, the jobs they held go back to the queue")
    plane.kill()


def api_key_for(explicit: str | None, data_dir: Path) -> str:
    """--api-key, else $LOCKGATE_API_KEY, else one generated once and kept in the data dir."""
    if explicit or os.environ.get("LOCKGATE_API_KEY"):
        return explicit or os.environ["LOCKGATE_API_KEY"]
    return kept_secret(data_dir, "api-key", "lg_")


def external_redis(redis_url: str | None) -> RedisSettings | None:
    """The external Redis to use: `--redis-url` (over any LOCKGATE_REDIS_* mode), else the
    LOCKGATE_REDIS_* settings when one of URL, cluster nodes or sentinels is set; None:
    start the embedded Redis."""
    if redis_url:
        return RedisSettings(**standalone(redis_url))
    settings = RedisSettings()
    where = {"redis_url", "redis_cluster_nodes", "redis_sentinels"}
    return settings if where & settings.model_fields_set else None


def template_id_for(handler: str | None, worker_command: str | None) -> str:
    """The command line's handler file or worker command as a dev-mode `templateId`."""
    if not handler:
        return worker_command or ""
    path = Path(handler).resolve()
    if path.suffix == HANDLER_SUFFIX:
        return str(path)
    return shlex.join([sys.executable, str(path)])  # a handler file named without `.py`


# The endpoint settings `lockgate dev`'s flags set: field, flag's dest, default when not given.
SPEC_FLAGS = (
    ("workersMin", "workers_min", 0),
    ("workersMax", "workers_max", 3),
    ("idleTimeout", "idle_timeout", 5),
    ("type", "endpoint_type", "QUEUE"),
    ("scalerValue", "scaler_value", 4),
)
ALWAYS_NAMED = frozenset({"templateId"})  # the handler argument names it


def named_fields(args: argparse.Namespace) -> frozenset[str]:
    """The endpoint fields the command line names: its handler's, and those whose flag was
    given (`scalerType` also with --endpoint-type, which chooses it). A console edit of any
    other field is kept over the command line's defaults at the next start."""
    named = {field for field, dest, _ in SPEC_FLAGS if getattr(args, dest, None) is not None}
    if args.scaler_type or "type" in named:
        named.add("scalerType")
    return ALWAYS_NAMED | named


def flag_value(args: argparse.Namespace, dest: str) -> object:
    """A spec flag's value, or its default when it was not given."""
    value = getattr(args, dest, None)
    return next(d for _, k, d in SPEC_FLAGS if k == dest) if value is None else value


def scaler_type_for(args: argparse.Namespace) -> str:
    """--scaler-type, else what the endpoint type scales on (LB: REQUEST_COUNT)."""
    if args.scaler_type:
        return args.scaler_type
    return "REQUEST_COUNT" if flag_value(args, "endpoint_type") == "LB" else "QUEUE_DELAY"


def options(args: argparse.Namespace) -> DevOptions:
    """Validate the command line into options, or exit with a message. With --git the
    repository is checked out and its venv made here, before anything starts."""
    given = [x for x in (args.handler, args.worker_command, args.git) if x]
    if len(given) > 1:
        sys.exit("lockgate dev: give one of a handler file, --worker-command or --git")
    if not given:
        sys.exit(
            "lockgate dev: give a handler file (lockgate dev handler.py), --worker-command "
            "or --git URL"
        )
    if (args.preset or args.git_cache) and not args.git:
        sys.exit("lockgate dev: --preset and --git-cache are for a --git repository")
    if args.handler and not Path(args.handler).is_file():
        sys.exit(f"lockgate dev: handler file {args.handler!r} not found")
    if not 0 <= flag_value(args, "workers_min") <= flag_value(args, "workers_max"):
        sys.exit("lockgate dev: need 0 <= --workers-min <= --workers-max")
    try:
        source = source_of(args)
    except (GitSourceError, HubFileError) as err:
        sys.exit(f"lockgate dev: {err}")
    endpoint_id = args.endpoint_id or source.endpoint_id
    if not ENDPOINT_ID_RE.fullmatch(endpoint_id):
        sys.exit(f"lockgate dev: --endpoint-id {endpoint_id!r}: use lowercase letters, digits, '-'")
    try:
        spec = EndpointSpec(
            name=endpoint_id,
            templateId=source.template_id,
            scalerType=scaler_type_for(args),
            **{field: flag_value(args, dest) for field, dest, _ in SPEC_FLAGS},
        )
    except ValidationError as err:
        sys.exit(f"lockgate dev: {describe_validation_error(err)}")
    data_dir = Path(args.data_dir)
    return DevOptions(
        endpoint_id=endpoint_id,
        spec=spec,
        named=named_fields(args),
        host=args.host,
        port=args.port,
        api_key=args.api_key or os.environ.get("LOCKGATE_API_KEY") or None,
        data_dir=data_dir,
        redis=external_redis(args.redis_url),
        launches=source.launches,
        tests=source.tests,
    )


@dataclass(frozen=True)
class Source:
    """What the command line's endpoint runs: its templateId, the launches made for it
    (--git), its default id, and the tests --test runs."""

    template_id: str
    endpoint_id: str
    launches: dict[str, Launch]
    tests: HubTests | None


def source_of(args: argparse.Namespace) -> Source:
    """The handler file, worker command or git repository the command line names. A git
    repository whose hub.json makes an LB endpoint makes one unless --endpoint-type says."""
    if not args.git:
        folder = Path(args.handler).resolve().parent if args.handler else Path.cwd()
        tests = load_tests(folder) if args.test else None
        endpoint_id = endpoint_id_for(args.handler, args.worker_command)
        return Source(template_id_for(args.handler, args.worker_command), endpoint_id, {}, tests)
    cache = Path(args.git_cache) if args.git_cache else default_cache_root()
    worker = git_worker(args.git, cache, preset=args.preset, with_tests=args.test, say=say)
    if worker.hub and worker.hub.config.endpoint_type == "LB" and args.endpoint_type is None:
        args.endpoint_type = EndpointType.LB.value  # the repository's hub.json says LB
    launch = worker.launch
    say(f"worker: {shlex.join(launch.command)} (in {launch.cwd})")
    return Source(
        launch.template_id, worker.endpoint_id, {launch.template_id: launch}, worker.tests
    )


def build_app(
    settings: Settings,
    *,
    gateway_url: str,
    base_dir: Path,
    data_dir: Path | None = None,
    stop_grace_s: float = STOP_GRACE_S,
    command_line_endpoint: str | None = None,
    command_line_fields: Collection[str] = (),
    launches: dict[str, Launch] | None = None,
) -> tuple[web.Application, LocalControlPlane]:
    """The gateway with the management API at `/v1` on the same port (one URL in dev mode),
    over a `LocalControlPlane` whose workers reach the gateway at `gateway_url`. Admin
    keys (the dev API key is one) may use `/v1/endpoints`; `/v1/about` tells the console
    it is dev mode, and which endpoint the command line defines. Network volumes are
    folders under `data_dir/volumes` (default: `base_dir/.lockgate`, the command's default)."""
    app = create_app(settings)
    gw = app[GATEWAY]
    folder = (data_dir or base_dir / DEFAULT_DATA_DIR).resolve()
    volumes_dir = folder / VOLUMES
    values = FileSecretValues(folder / SECRETS)
    plane = LocalControlPlane(
        gw,
        gateway_url=gateway_url,
        base_dir=base_dir,
        volumes_dir=volumes_dir,
        stop_grace_s=stop_grace_s,
        secret_values=values,
        launches=launches,
    )
    storage = LocalStorage(gw.registry, volumes_dir)
    catalogue = catalogue_of(ConsoleSettings())  # LOCKGATE_CONSOLE_CATALOGUE, as on a cluster
    about = About(DEV, command_line_endpoint, tuple(sorted(command_line_fields)), catalogue)
    manage = create_manage_app(plane, storage, gw.auth, prefix="", about=about)
    sampler = HistorySampler(gw.store, gw.registry)
    add_history_routes(manage, sampler)
    app.add_subapp("/v1", manage)
    add_graphql_route(app, manage)  # the runpod SDK's management calls
    account = AccountSecrets(gw.registry, values, plane)
    releases = Releases(plane.releases, plane.worker_versions)
    billing = Billing(UsageLedger(gw.store.redis), Prices())  # LOCKGATE_*_PRICE(S)
    backends = Backends(
        plane,
        storage,
        gw.auth,
        secrets=account,
        catalog=LocalCatalog(),
        billing=billing,
        releases=releases,
        workers=DevWorkers(plane),
        builds=plane.builds,
    )
    add_v2_routes(app, backends)  # RunPod's REST v2 (the catalog: this machine)
    add_git_hook_route(app, plane, HookSecrets(gw.registry.redis))  # no key: signed
    gateway_mark = gw.notifier.on_activity

    def mark(endpoint_id: str) -> None:  # the gateway's subscription tells both
        gateway_mark(endpoint_id)
        sampler.mark(endpoint_id)

    gw.notifier.on_activity = mark
    gateway_missed = gw.notifier.on_subscribed

    def missed_events() -> None:
        gateway_missed()
        sampler.missed_events()

    gw.notifier.on_subscribed = missed_events
    app.cleanup_ctx.append(history_sampler(sampler))
    add_console(app, connect_src=origin_of(settings.base_url))  # LOCKGATE_BASE_URL's origin
    return app, plane


async def start_endpoints(plane: LocalControlPlane, opts: DevOptions) -> None:
    """Endpoints an earlier run created through the API, then the command line's one."""
    for record in await plane.resume(skip={opts.endpoint_id}):
        say(f"endpoint {record.id!r} resumed ({record.status.phase}): job API {record.jobApiUrl}")
    try:
        await plane.apply(opts.endpoint_id, opts.spec, opts.named)
    except UnusableSettings as err:
        raise SystemExit(f"lockgate dev: {err}") from err
    if edits := plane.edits_of(opts.endpoint_id):
        kept = ", ".join(f"{k}={v!r}" for k, v in sorted(edits.items()))
        say(f"endpoint {opts.endpoint_id!r}: earlier edits kept (no flag names them): {kept}")


def dev_settings(opts: DevOptions, redis: RedisSettings) -> Settings:
    """The gateway's settings: LOCKGATE_* as `lockgate gateway` reads them (LOCKGATE_HOST,
    LOCKGATE_PORT, ...), the command line's --host and --port over them, and dev mode's own:
    this Redis, private webhook targets allowed, a webhook secret kept in the data dir
    unless LOCKGATE_WEBHOOK_SECRET is set."""
    flags = {k: v for k, v in {"host": opts.host, "port": opts.port}.items() if v is not None}
    secret = os.environ.get("LOCKGATE_WEBHOOK_SECRET") or kept_secret(
        opts.data_dir, "webhook-secret", "whsec_"
    )
    return Settings(
        **redis.model_dump(), **flags, webhook_allow_private=True, webhook_secret=secret
    )


def cannot_listen(host: str, port: int, err: OSError) -> str:
    """The one line for a port dev mode cannot listen on, naming the settings to change."""
    if err.errno == errno.EADDRINUSE:
        return (
            f"port {port} is in use (another lockgate dev?): stop what uses it, or choose "
            "another port with --port or LOCKGATE_PORT"
        )
    reason = (err.strerror or str(err)).lower()
    return (
        f"cannot listen on {host}:{port} ({reason}): choose another address with --host / "
        "LOCKGATE_HOST or port with --port / LOCKGATE_PORT"
    )


def listen_problem(host: str, port: int) -> str | None:
    """Why dev mode could not listen on `host:port`, asked before anything starts (so a
    busy port is one line, with no background task of a half-started gateway speaking
    after it), or None. The real bind still reports a port taken in between."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind((host, port))
        except OSError as err:
            return cannot_listen(host, port, err)
    return None


def write_cli_config(url: str, key: str) -> None:
    """Point the `lockgate` CLI (endpoints, jobs, logs) at this dev mode, and say so."""
    try:
        path = clientconfig.save_for_dev(url, key)
    except OSError as err:
        say(f"CLI config not written ({err.strerror}): use --url and --key")
        return
    if path is None:
        say(f"CLI config kept ({clientconfig.config_path()}: written by lockgate login)")
    else:
        say(f"CLI: lockgate endpoints list, lockgate jobs run … (config in {path})")


async def serve(opts: DevOptions, redis: RedisSettings, stop: Stop) -> bool | None:
    """Gateway, management API and local endpoints until `stop` is set (or, with --test,
    the tests have run); then shut down in order: scaling stops, long-polls are answered,
    workers finish their jobs, then the rest. Whether every test passed (None: no tests,
    or stopped before they ended)."""
    settings = dev_settings(opts, redis)
    if why := listen_problem(settings.host, settings.port):
        raise SystemExit(f"lockgate dev: {why}")
    local_url = f"http://127.0.0.1:{settings.port}"
    app, plane = build_app(
        settings,
        gateway_url=local_url,
        base_dir=Path.cwd(),
        data_dir=opts.data_dir,
        command_line_endpoint=opts.endpoint_id,
        command_line_fields=opts.named,
        launches=opts.launches,
    )
    gw = app[GATEWAY]
    runner = app_runner(app, settings, access_log=None, shutdown_timeout=2)
    try:
        await serve_runner(runner, settings, settings.port, gw.header_timeout)
    except OSError as err:
        await runner.cleanup()
        why = cannot_listen(settings.host, settings.port, err)
        raise SystemExit(f"lockgate dev: {why}") from err
    await gw.registry.put_key(opts.api_key, {"name": "dev", "scopes": ["jobs", "admin"]})
    try:
        await start_endpoints(plane, opts)
        base = settings.public_base_url()
        write_cli_config(base, opts.api_key)
        lb = opts.spec.type == EndpointType.LB
        if lb:
            say(f"endpoint {opts.endpoint_id!r} ready: load balancer {base}/lb/{opts.endpoint_id}/"
                "<path> (any method, sent to a worker as /<path>)")  # fmt: skip
            say(f"OpenAI base_url: {base}/lb/{opts.endpoint_id}/v1 (if the worker serves it)")
        else:
            say(f"endpoint {opts.endpoint_id!r} ready: job API {base}/v2/{opts.endpoint_id}")
            say(f"OpenAI base_url: {base}/v2/{opts.endpoint_id}/openai/v1 (api_key: the API key)")
        say(f"management API: {base}/v1/endpoints, {base}/v1/templates (Bearer <API key>)")
        say(f"runpod SDK management calls: RUNPOD_API_BASE_URL={base} (/graphql)")
        say(f"console: {base}/console/ (sign in with the API key)")
        say(f"API key: {opts.api_key}")
        say(f"try: {curl_line(base, opts.endpoint_id, opts.api_key, lb=lb)}")
        passed = await tested(opts, local_url, stop) if opts.tests is not None else None
        await stop.wait()
        say(stopping_line(await plane.jobs_in_hand(), plane.stop_grace_s))
    finally:
        killer = asyncio.create_task(kill_when(stop.now, plane))
        try:
            await plane.close()
        finally:
            killer.cancel()
        await runner.cleanup()
    return passed


async def tested(opts: DevOptions, local_url: str, stop: Stop) -> bool | None:
    """--test: run the tests against the command line's endpoint, then stop dev mode (the
    tests were what this run was for); whether all passed, None when stopped first."""
    lb = opts.spec.type == EndpointType.LB
    url = f"{local_url}/{'lb' if lb else 'v2'}/{opts.endpoint_id}"
    passed = await until_stopped(run_repo_tests(url, opts.api_key, opts.tests, lb=lb), stop)
    stop.first.set()
    return passed


async def run_repo_tests(url: str, api_key: str, tests: HubTests, *, lb: bool = False) -> bool:
    """tests.json's tests through the job API at `url` (`lb`: requests through the
    load-balancing route at `url`), a line each and a summary; whether all passed."""
    say(f"testing: {len(tests.tests)} test(s) of tests.json through {url}")
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            results = await run_tests(
                session, url, {"authorization": api_key}, tests.tests,
                report=lambda r: say(result_line(r)), run=run_lb_test if lb else None,
            )  # fmt: skip
    except aiohttp.ClientError as err:
        say(f"tests stopped: the job API could not be reached ({err})")
        return False
    say(summary_line(results))
    return all(r.passed for r in results)


async def until_stopped(work: Coroutine[Any, Any, T], stop: Stop) -> T | None:
    """`work`'s result, or None when `stop` comes first (`work` is then cancelled)."""
    task, stopped = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


def take_data_dir(opts: DevOptions) -> tuple[DevOptions, int]:
    """Make the data folder this process's (or exit naming the `lockgate dev` that has it,
    touching nothing of it) and private; the options with the API key, and the lock's
    descriptor (held for the process's life)."""
    port = opts.port if opts.port is not None else Settings().port
    try:
        lock = claim(opts.data_dir, port)
    except DataDirInUse as err:
        raise SystemExit(f"lockgate dev: {err}") from err
    make_private(opts.data_dir)
    return dataclasses.replace(opts, api_key=api_key_for(opts.api_key, opts.data_dir)), lock


def ready_line(redis: EmbeddedRedis, data_dir: Path) -> str:
    """Where the embedded Redis listens, and how `lockgate keys` reaches it (its password
    stays in its file, off the terminal)."""
    password = data_dir / REDIS_PASSWORD_FILE
    return (
        f"redis ready on 127.0.0.1:{redis.port} (append-only, data in {data_dir}, password in "
        f'{password}): lockgate keys --redis-url "redis://:$(cat {shlex.quote(str(password))})'
        f'@127.0.0.1:{redis.port}/0"'
    )


async def run(opts: DevOptions) -> int:
    opts, lock = take_data_dir(opts)
    embedded = None
    if opts.redis is None:
        embedded = EmbeddedRedis(
            opts.data_dir,
            password=kept_secret(opts.data_dir, REDIS_PASSWORD_FILE),
            keep_fds=(lock,),  # the folder stays taken until this Redis has exited too
            die_with_parent=True,
        )
        embedded.start()
        say(ready_line(embedded, opts.data_dir))
    else:
        say(f"using {opts.redis.describe()} (no embedded Redis)")
    stop = Stop()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.signalled, sig)
    try:
        redis = opts.redis or RedisSettings(**standalone(embedded.url))
        passed = await serve(opts, redis, stop)
    finally:
        if embedded is not None:
            embedded.stop()
        say("stopped" if stop.forced is None else "stopped at once")
    return exit_code(stop.exit_code(), opts.tests is not None, passed)


def exit_code(stopped: int, tested: bool, passed: bool | None) -> int:
    """The exit code: the stop's (0, or 128 + the signal of a forced stop); with --test,
    1 when a test failed and 130 when Ctrl-C came before the tests ended."""
    if not tested or stopped != 0:
        return stopped
    return 0 if passed else 1 if passed is False else 130


def main(args: argparse.Namespace) -> int:
    """Run dev mode; 0 after a stop that let the jobs in hand finish (1 when --test ran
    and a test failed), 128 + the signal's number (130 for Ctrl-C) after a second signal
    stopped it at once."""
    setup_logging("text")
    opts = options(args)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(run(opts))
