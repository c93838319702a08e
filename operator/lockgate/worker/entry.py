"""`start()`: run the handler locally for `--test_input`, else serve the gateway until stopped."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from . import config, local, logs
from .batching import BatchOptionsError
from .fitness import run_fitness_checks
from .logs import log
from .options import StartOptions
from .runtime import EXIT_OK, EXIT_RESTART, Runtime, exit_now, restart_now


def start(settings: Mapping[str, Any]) -> NoReturn:
    """Run a worker with `settings` as `runpod.serverless.start` takes them; never returns.

    Keys: `handler` (required), `return_aggregate_stream`, `concurrency_modifier`,
    `refresh_worker`, and lockgate's own `batch` (`batching`). A bad setting exits 2
    with one line on stderr. Serving a gateway, the fitness checks run first (`fitness`): a
    failing one reports the worker unhealthy and exits 1; a local test run runs none.
    Exits 0 after SIGTERM/SIGINT once the jobs in hand are reported, 1 on a failed local
    test. A stopped sync handler cannot be interrupted in its thread:
    once no other job is in hand the worker re-executes its own command line (same pid
    and worker id), or exits 3 for its supervisor when that fails.
    """
    try:
        options = StartOptions.from_mapping(settings)
    except (TypeError, BatchOptionsError) as err:
        print(f"lockgate.worker: cannot start: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    args = _parse_args()
    logs.setup(args.rp_log_level or config.log_level())
    if args.test_input is not None or not config.gateway_configured():
        sys.exit(local.main(options, args.test_input))
    try:
        worker_config = config.load()
    except config.ConfigError as err:
        log.error("cannot start: %s", err)
        sys.exit(2)
    runtime = Runtime(options, worker_config)
    status = _serve(runtime, worker_config)
    if status == EXIT_RESTART:
        restart_now(worker_config.worker_id)
    if status != EXIT_OK or runtime.abandoned:
        exit_now(status)  # an abandoned handler thread would otherwise hold the exit
    sys.exit(status)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="lockgate worker", allow_abbrev=False)
    parser.add_argument("--test_input", help="run one job locally: '{\"input\": {...}}'")
    parser.add_argument("--rp_log_level", help="log level (as the runpod SDK's flag)")
    args, rest = parser.parse_known_args()
    sys.argv = sys.argv[:1] + rest  # leave the handler's own flags to the handler
    return args


def _serve(runtime: Runtime, worker_config: config.WorkerConfig) -> int:
    """The fitness checks (a failure exits the process), then the worker's loops."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(run_fitness_checks(worker_config))
        return runner.run(runtime.run())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None  # the standard event loop
    return uvloop.new_event_loop
