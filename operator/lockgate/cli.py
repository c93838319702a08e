"""The `lockgate` command: dev mode, gateway, operator, keys, CRDs, uninstall cleanup, and
the daily-work commands over HTTP (endpoints, templates, jobs, logs, login: `commands/`).

Every error is one line on stderr that says what to do, and a non-zero exit; a traceback
only with LOCKGATE_DEBUG=1."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int | None]


def _dev(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dev",
        help="run everything in one process: Redis, gateway, local workers",
        description="Dev mode: an embedded Redis (or an external one: --redis-url or the "
        "LOCKGATE_REDIS_* settings), the gateway and a local pool of worker processes "
        "running HANDLER.py (or --worker-command, or a git repository's handler: --git), "
        "scaled from the queue.",
    )
    p.add_argument("handler", nargs="?", help="handler file, started as `python HANDLER.py`")
    p.add_argument("--worker-command", help="run this command as each worker instead")
    p.add_argument(
        "--git",
        metavar="URL[@REF]",
        help="run a git repository's handler.py (or its Dockerfile's Python CMD) as the "
        "worker, in a venv of its own made from its requirements.txt (or the Dockerfile's "
        "pip install lines); URL: https://, file:// or a local path; REF: a branch, tag or "
        "commit (default: the remote's HEAD); docs/dev-from-git.md",
    )
    p.add_argument(
        "--git-cache",
        metavar="DIR",
        help="where --git keeps its clones and venvs (default $XDG_CACHE_HOME/lockgate/git, "
        "else ~/.cache/lockgate/git)",
    )
    p.add_argument(
        "--preset",
        help="with --git: give the workers this hub.json preset's variables",
    )
    p.add_argument(
        "--test",
        action="store_true",
        help="run tests.json (.runpod/tests.json first; the repository's with --git, else the "
        "handler's folder's) against the endpoint through the job API once it is up, print "
        "one line per test, then stop; exit code 1 when a test fails",
    )
    p.add_argument("--endpoint-id", help="default: the handler's folder or file name")
    p.add_argument("--host", help="listen address (LOCKGATE_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (LOCKGATE_PORT, default 8080)")
    p.add_argument("--api-key", help="client API key (default $LOCKGATE_API_KEY or generated)")
    p.add_argument("--workers-min", type=int, help="default 0")
    p.add_argument("--workers-max", type=int, help="default 3")
    p.add_argument("--idle-timeout", type=int, help="seconds (default 5)")
    p.add_argument(
        "--endpoint-type",
        choices=["QUEUE", "LB"],
        help="QUEUE: jobs through the job API (default); LB: requests proxied to each "
        "worker's own HTTP server at /lb/<endpoint>/ (docs/load-balancing.md)",
    )
    p.add_argument(
        "--scaler-type",
        choices=["QUEUE_DELAY", "REQUEST_COUNT"],
        default=None,
        help="how the pool grows (default QUEUE_DELAY; REQUEST_COUNT for --endpoint-type LB)",
    )
    p.add_argument(
        "--scaler-value",
        type=int,
        help="QUEUE_DELAY: seconds a job may wait; REQUEST_COUNT: jobs per worker (default 4)",
    )
    p.add_argument(
        "--data-dir", default=".lockgate", help="Redis data and network volumes (default .lockgate)"
    )
    p.add_argument(
        "--redis-url",
        help="use this Redis (redis:// or rediss://) instead of starting one; without it, "
        "LOCKGATE_REDIS_URL, LOCKGATE_REDIS_CLUSTER_NODES or LOCKGATE_REDIS_SENTINELS (with "
        "LOCKGATE_REDIS_SENTINEL_MASTER) name an external Redis of that mode",
    )
    p.set_defaults(run=_lazy("lockgate.apps.dev", "main"))


def _gateway(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gateway",
        help="serve the job API and worker API",
        description="The gateway: client job API, worker API and /metrics over one Redis. "
        "Settings come from LOCKGATE_* variables; flags override the common ones.",
    )
    p.add_argument("--host", help="listen address (LOCKGATE_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (LOCKGATE_PORT, default 8080)")
    p.add_argument("--redis-url", help="LOCKGATE_REDIS_URL, default redis://127.0.0.1:6379/0")
    p.add_argument(
        "--processes",
        type=_gateway_processes,
        default=os.environ.get("LOCKGATE_GATEWAY_PROCESSES", "1"),
        help="gateway processes sharing the port(s) with SO_REUSEPORT, under a supervising "
        "parent (LOCKGATE_GATEWAY_PROCESSES, default 1); 0 or auto: one per CPU of the "
        "container's CPU limit (cgroup cpu.max), else of its CPU affinity",
    )
    p.add_argument("--log-format", choices=["text", "json"], default="json")
    p.set_defaults(run=_lazy("lockgate.apps.gateway", "main"))


def _gateway_processes(value: str) -> int:
    from lockgate.supervisor import parse_processes

    return parse_processes(value)


def _operator(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "operator",
        help="reconcile Endpoint/Template resources",
        description="The Kubernetes operator (kopf) and the scaler. In a cluster the "
        "management API runs apart (`lockgate manage`); --manage-port serves it here too, "
        "for development, with the operator's own Kubernetes account: under the chart's "
        "operator RBAC it may not write Endpoints or claims (those routes answer 503 naming "
        "the refusal).",
    )
    p.add_argument("--namespace", action="append", help="watch only these (default: all)")
    p.add_argument(
        "--manage-port",
        type=int,
        help="also serve the management API on this port (LOCKGATE_MANAGE_PORT; 0: off)",
    )
    p.add_argument("--log-format", choices=["text", "json"], default="json")
    p.set_defaults(run=_lazy("lockgate.apps.operator", "main"))


def _manage(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "manage",
        help="serve the management API (/v1/endpoints) apart from the operator",
        description="The management API: creates, edits and deletes Endpoint resources in "
        "one namespace for holders of admin keys. Settings come from LOCKGATE_* variables "
        "(LOCKGATE_REDIS_URL, LOCKGATE_KEYS_FILE, LOCKGATE_BASE_URL, ...); flags win.",
    )
    p.add_argument("--host", help="listen address (LOCKGATE_MANAGE_HOST, default 0.0.0.0)")
    p.add_argument("--port", type=int, help="listen port (LOCKGATE_MANAGE_PORT, default 8081)")
    p.add_argument(
        "--endpoint-namespace",
        help="where Endpoints are written (LOCKGATE_ENDPOINT_NAMESPACE; default: the first "
        "of LOCKGATE_NAMESPACES, else default)",
    )
    p.set_defaults(run=_lazy("lockgate.apps.manage", "main"))


def _keys(sub: argparse._SubParsersAction) -> None:
    from lockgate.commands.args import connection

    # --redis-url and the connection options before or after the action: parents of both
    # parsers, SUPPRESS by default so that the action's parser does not reset the group's
    redis = argparse.ArgumentParser(add_help=False, parents=[connection()])
    redis.add_argument(
        "--redis-url",
        default=argparse.SUPPRESS,
        help="bootstrap: write to this standalone Redis itself instead of the management API "
        "(also when LOCKGATE_REDIS_* settings are set, as in lockgate's pods)",
    )
    p = sub.add_parser(
        "keys",
        help="create, list and revoke API keys",
        parents=[redis],
        description="API keys, stored in Redis as their SHA-256. Scopes: jobs (client job "
        "API), jobs:read (status, stream, health), workers (worker API), admin (management). "
        "Over the management API (/v1/keys) with the URL and admin key of the other commands "
        "(--url, --key, lockgate login); to Redis itself only to bootstrap the first admin "
        "key (--redis-url, or LOCKGATE_REDIS_* set).",
    )
    keys = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = keys.add_parser("create", help="create a key and print it (once)", parents=[redis])
    create.add_argument("name", help="who owns the key; rate limits count per name")
    create.add_argument(
        "--scope", action="append", required=True, help="jobs, jobs:read, workers or admin"
    )
    create.add_argument("--endpoint", action="append", help="only these endpoints (default all)")
    create.add_argument(
        "--expires-in", metavar="DURATION",
        help="refuse the key after this long: 90s, 15m, 12h, 30d (default: never)",
    )  # fmt: skip
    create.add_argument(
        "--expires-at", metavar="TIME",
        help="refuse the key from this RFC 3339 time, e.g. 2027-01-01T00:00:00Z",
    )  # fmt: skip
    create.add_argument(
        "--file-entry", action="store_true",
        help="write nothing to Redis; print the key and its entry for the key file",
    )  # fmt: skip
    keys.add_parser(
        "list",
        help="list keys: id, name, scopes, endpoints, expiry (never the key)",
        parents=[redis],
    )
    revoke = keys.add_parser("revoke", help="revoke keys by name or id", parents=[redis])
    revoke.add_argument("name_or_id", help="a key's name, or the start of its id")
    revoke.add_argument(
        "--force", action="store_true",
        help="revoke even the last admin key stored in Redis, or the key this CLI signs in with",
    )  # fmt: skip
    p.set_defaults(run=_lazy("lockgate.commands.keys", "main"))


def _crds(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "crds",
        help="print or write the CustomResourceDefinitions",
        description="Render the CRDs from the pydantic models (plain files or chart templates).",
    )
    p.add_argument("--out", help="write one file per CRD into this folder (default: stdout)")
    p.add_argument("--chart", help="also write them as Helm templates into CHART/templates/crds")
    p.set_defaults(run=_lazy("lockgate.kube.crds", "main"))


def _uninstall_cleanup(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "uninstall-cleanup",
        help="stop the operator and its workers before `helm uninstall` (the chart's hook)",
        description="Scale the operator to 0 and wait for its pods, delete every Endpoint's "
        "worker Deployment and flashboot DaemonSet, remove the lockgate.dev/cleanup "
        "finalizer from Endpoints and Templates, delete the release's kopf peering objects. "
        "Endpoints, Templates and worker-key Secrets stay. Run by the chart's pre-delete "
        "hook; uses the pod's service account, else $KUBECONFIG.",
    )
    p.add_argument("--release-namespace", required=True, help="where the operator runs")
    p.add_argument("--operator-deployment", required=True, help="the operator Deployment's name")
    p.add_argument("--namespace", action="append", help="the operator's namespaces (default: all)")
    p.add_argument("--endpoint-namespace", help="the management API's namespace, if apart")
    p.add_argument(
        "--peering-selector", default="",
        help="label selector of the release's KopfPeering/ClusterKopfPeering objects "
        "(default: none, peering is off)",
    )  # fmt: skip
    p.add_argument(
        "--builds", action="store_true",
        help="delete the build Jobs too (in-cluster builds are on: builds.registry)",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=120, help="seconds to finish in (default 120)")
    p.set_defaults(run=_lazy("lockgate.kube.uninstall", "main"))


def _fetch_models(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fetch-models",
        help="download Hugging Face models into a cache (worker pods' init container)",
        description="Download each reference org/name[:revision] with huggingface_hub into "
        "ROOT/huggingface-cache/hub (the Hugging Face cache layout); what is there is kept. "
        "HF_ENDPOINT and HF_TOKEN are honoured. Exit 1 with one line naming the reference "
        "and the hub's answer when one cannot be fetched.",
    )
    p.add_argument("--root", required=True, help="the folder holding huggingface-cache/")
    p.add_argument("references", nargs="+", metavar="REFERENCE", help="org/name[:revision]")
    p.set_defaults(run=_lazy("lockgate.hfcache", "main"))


def _lazy(module: str, name: str) -> Command:
    """Import a command's module only when it runs: `lockgate dev` needs no kopf."""

    def run(args: argparse.Namespace) -> int | None:
        import importlib

        return getattr(importlib.import_module(module), name)(args)

    return run


def _remote(module: str, name: str) -> Command:
    """A daily-work command: `module.name(args, api)` with the API client it needs."""

    def run(args: argparse.Namespace) -> int | None:
        import importlib

        from lockgate.commands.session import run_action

        return run_action(args, getattr(importlib.import_module(module), name))

    return run


def _completion(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Completion of commands and actions: `source <(lockgate completion bash)`.",
    )
    p.add_argument("shell", choices=["bash"], help="the shell (bash; zsh loads it too)")
    p.set_defaults(run=_print_completion)


def _print_completion(args: argparse.Namespace) -> int:
    print(completion_script(parser()))
    return 0


def completion_script(top: argparse.ArgumentParser) -> str:
    """A bash completion function for `top`'s commands, their actions and options."""
    cases = []
    commands = _choices(top)
    for name, command in commands.items():
        words = " ".join([*_choices(command), *_options(command)])
        cases.append(f'        {name}) words="{words}" ;;')
    return "\n".join([
        "# lockgate completion (bash): source <(lockgate completion bash)",
        "_lockgate() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" words',
        "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
        f'        words="{" ".join([*commands, "--version", "--help"])}"',
        "    else",
        '        case "${COMP_WORDS[1]}" in',
        *cases,
        '        *) words="" ;;',
        "        esac",
        "    fi",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _lockgate lockgate",
    ])  # fmt: skip


def _choices(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(p: argparse.ArgumentParser) -> list[str]:
    return [o for a in p._actions for o in a.option_strings if o.startswith("--")]


def version() -> str:
    """The installed lockgate's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("lockgate")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    from lockgate.commands.args import add_client_commands

    p = argparse.ArgumentParser(
        prog="lockgate",
        description="Self-hosted queue-based serverless endpoints with the RunPod job API.",
    )
    p.add_argument("--version", action="version", version=f"lockgate {version()}")
    sub = p.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for add in (
        _dev,
        _gateway,
        _operator,
        _manage,
        _keys,
        _crds,
        _uninstall_cleanup,
        _fetch_models,
    ):
        add(sub)
    add_client_commands(sub, _remote)
    _completion(sub)
    return p


def one_line(text: object) -> str:
    """`text` on one line (an error message may hold newlines)."""
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `lockgate logs … | head -1`: the reader has what it wanted
        # Python's own advice: point stdout at /dev/null so its flush at exit is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as err:  # unexpected: still one line, the traceback on request
        if os.environ.get("LOCKGATE_DEBUG"):
            raise
        print(
            f"lockgate: unexpected error: {type(err).__name__}: {one_line(err)} "
            "(LOCKGATE_DEBUG=1 shows the traceback; please report it)",
            file=sys.stderr,
        )
        return 1


def _run(args: argparse.Namespace) -> int:
    """Run the command; the expected errors become one line and an exit code."""
    from pydantic import ValidationError

    from lockgate.client import ClientError, NotSent
    from lockgate.store.connection import RedisSettingsError, describe_settings_error

    try:
        return int(args.run(args) or 0)
    except (RedisSettingsError, ValidationError) as err:  # bad LOCKGATE_* settings at startup
        message = describe_settings_error(err) if isinstance(err, ValidationError) else str(err)
        print(f"lockgate: invalid settings: {one_line(message)}", file=sys.stderr)
        return 2
    except ClientError as err:
        print(f"lockgate: {one_line(err)}", file=sys.stderr)
        return 2 if isinstance(err, NotSent) else 1


if __name__ == "__main__":
    sys.exit(main())
