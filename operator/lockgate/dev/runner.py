"""`lockgate dev`: embedded Redis, gateway and a local worker pool in one process."""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import secrets
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from lockgate.dev.names import curl_line, endpoint_id_for
from lockgate.dev.redis_server import EmbeddedRedis
from lockgate.gateway.app import create_app
from lockgate.gateway.state import GATEWAY
from lockgate.logs import setup_logging
from lockgate.models import EndpointSpec
from lockgate.scaling.autoscaler import LocalAutoscaler
from lockgate.scaling.decision import Limits
from lockgate.scaling.local_pool import LocalProcessPool
from lockgate.settings import Settings
from lockgate.store import key_digest
from lockgate.workerenv import worker_env

log = logging.getLogger("lockgate.dev")


@dataclass(frozen=True)
class DevOptions:
    command: list[str]
    cwd: str | None
    endpoint_id: str
    host: str
    port: int
    api_key: str
    limits: Limits
    data_dir: Path


def say(line: str) -> None:
    """A progress line for the person at the terminal."""
    print(f"lockgate dev | {line}", flush=True)


def secret_in(data_dir: Path, name: str, prefix: str) -> str:
    """A secret generated once and kept (mode 600) in the data dir, so restarts keep it."""
    path = data_dir / name
    if path.exists():
        return path.read_text().strip()
    value = prefix + (
        base64.b64encode(secrets.token_bytes(24)).decode()
        if prefix == "whsec_"
        else secrets.token_urlsafe(24)
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def api_key_for(explicit: str | None, data_dir: Path) -> str:
    """--api-key, else $LOCKGATE_API_KEY, else one generated once and kept in the data dir."""
    if explicit or os.environ.get("LOCKGATE_API_KEY"):
        return explicit or os.environ["LOCKGATE_API_KEY"]
    return secret_in(data_dir, "api-key", "lg_")


def options(args: argparse.Namespace) -> DevOptions:
    """Validate the command line into options, or exit with a message."""
    if args.handler and args.worker_command:
        sys.exit("lockgate dev: give a handler file or --worker-command, not both")
    if not args.handler and not args.worker_command:
        sys.exit("lockgate dev: give a handler file (lockgate dev handler.py) or --worker-command")
    if args.handler and not Path(args.handler).is_file():
        sys.exit(f"lockgate dev: handler file {args.handler!r} not found")
    if not 0 <= args.workers_min <= args.workers_max:
        sys.exit("lockgate dev: need 0 <= --workers-min <= --workers-max")
    if args.handler:
        handler = Path(args.handler).resolve()
        command, cwd = [sys.executable, str(handler)], str(handler.parent)
    else:
        command, cwd = shlex.split(args.worker_command), None
    data_dir = Path(args.data_dir)
    return DevOptions(
        command=command,
        cwd=cwd,
        endpoint_id=args.endpoint_id or endpoint_id_for(args.handler, args.worker_command),
        host=args.host,
        port=args.port,
        api_key=api_key_for(args.api_key, data_dir),
        limits=Limits(args.workers_min, args.workers_max, args.idle_timeout),
        data_dir=data_dir,
    )


async def serve(opts: DevOptions, redis_url: str, stop: asyncio.Event) -> None:
    """Gateway, registry entries and local pool until `stop` is set; then shut down in order."""
    settings = Settings(
        redis_url=redis_url, host=opts.host, port=opts.port, webhook_allow_private=True,
        webhook_secret=secret_in(opts.data_dir, "webhook-secret", "whsec_"),
    )  # fmt: skip
    runner = web.AppRunner(create_app(settings), access_log=None, shutdown_timeout=2)
    await runner.setup()
    gw = runner.app[GATEWAY]
    worker_key = f"lgw_{secrets.token_urlsafe(24)}"
    spec = EndpointSpec(
        name=opts.endpoint_id, workersMin=opts.limits.workers_min,
        workersMax=opts.limits.workers_max, idleTimeout=int(opts.limits.idle_timeout_s),
    )  # fmt: skip
    await gw.registry.put_endpoint(opts.endpoint_id, {"id": opts.endpoint_id, **spec.model_dump()})
    await gw.registry.put_key(opts.api_key, {"name": "dev", "scopes": ["jobs", "admin"]})
    await gw.registry.put_key(
        worker_key,
        {"name": f"dev-worker:{opts.endpoint_id}", "scopes": ["workers"],
         "endpoints": [opts.endpoint_id]},
    )  # fmt: skip
    await web.TCPSite(runner, opts.host, opts.port).start()
    local_url = f"http://127.0.0.1:{opts.port}"
    pool = LocalProcessPool(
        opts.endpoint_id, opts.command, worker_env(local_url, opts.endpoint_id, worker_key),
        cwd=opts.cwd,
    )  # fmt: skip
    scaler = LocalAutoscaler(gw.store, pool, opts.endpoint_id, opts.limits)
    scaling = asyncio.create_task(scaler.run())
    base = settings.public_base_url()
    say(f"endpoint {opts.endpoint_id!r} ready: job API {base}/v2/{opts.endpoint_id}")
    say(f"API key: {opts.api_key}")
    say(f"try: {curl_line(base, opts.endpoint_id, opts.api_key)}")
    await stop.wait()
    say("stopping: workers finish the jobs in hand…")
    scaling.cancel()
    gw.drain()
    await pool.close()
    await scaler.release_all()
    await gw.registry.delete_key(key_digest(worker_key))
    await runner.cleanup()


async def run(opts: DevOptions) -> None:
    redis = EmbeddedRedis(opts.data_dir)
    redis.start()
    say(f"redis ready on 127.0.0.1:{redis.port} (append-only, data in {opts.data_dir})")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await serve(opts, redis.url, stop)
    finally:
        redis.stop()
        say("stopped")


def main(args: argparse.Namespace) -> int:
    setup_logging("text")
    opts = options(args)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(run(opts))
    return 0
