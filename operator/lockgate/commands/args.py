"""The daily-work commands' command line (argparse): `endpoints`, `templates`, `jobs`,
`logs`, `login`, `completion`. Their options are accepted before or after the action
(`lockgate endpoints list -o json` and `lockgate endpoints -o json list`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from lockgate.output import FORMATS

Lazy = Callable[[str, str], Callable]


def connection() -> argparse.ArgumentParser:
    """--url, --key, --job-url, -o: a parent of every group and action parser. Defaults are
    SUPPRESS, so an option given to the group is not reset by the action's parser."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--url", default=argparse.SUPPRESS,
        help="lockgate's management API (LOCKGATE_URL, else the config file, else "
        "http://127.0.0.1:8080, lockgate dev's); the config file's key goes to its own URL only",
    )  # fmt: skip
    p.add_argument(
        "--key", default=argparse.SUPPRESS,
        help="API key (LOCKGATE_API_KEY, else the config file written by lockgate login)",
    )  # fmt: skip
    p.add_argument(
        "--job-url", default=argparse.SUPPRESS,
        help="the job API, when apart from --url (LOCKGATE_JOB_URL; default: --url)",
    )  # fmt: skip
    p.add_argument(
        "--insecure", action="store_true", default=argparse.SUPPRESS,
        help="send the key over plain http:// to a host that is not this machine, with a "
        "warning (LOCKGATE_INSECURE=1); refused without it",
    )  # fmt: skip
    p.add_argument(
        "-o", "--output", choices=FORMATS, default=argparse.SUPPRESS,
        help="table (default), json or yaml",
    )  # fmt: skip
    return p


def group(sub: argparse._SubParsersAction, name: str, help_: str) -> argparse._SubParsersAction:
    """A command with actions (`lockgate NAME ACTION`), taking the connection options too."""
    p = sub.add_parser(name, help=help_, description=help_, parents=[connection()])
    return p.add_subparsers(dest=f"{name}_action", metavar="ACTION", required=True)


def action(actions: argparse._SubParsersAction, name: str, help_: str) -> argparse.ArgumentParser:
    return actions.add_parser(name, help=help_, description=help_, parents=[connection()])


def endpoint_fields(p: argparse.ArgumentParser) -> None:
    """The fields `endpoints create` and `edit` set by name, -f and --set (RunPod's v2)."""
    p.add_argument("--name", help="display name")
    p.add_argument("--template-id", help="a template whose container settings it starts from")
    p.add_argument("--image", help="the container image (dev mode: any name)")
    p.add_argument("--args", help="the command's arguments, one string (dev mode: the command)")
    p.add_argument("--gpu", action="append", metavar="POOL", help="a GPU pool id (repeat it)")
    p.add_argument("--cpu", action="append", metavar="FLAVOR", help="a CPU flavor id, or any")
    p.add_argument("--vcpu-count", type=int, default=2, help="vCPUs per worker with --cpu")
    p.add_argument("--workers-min", type=int, help="workers kept running")
    p.add_argument("--workers-max", type=int, help="most workers at once")
    p.add_argument("--idle-timeout", type=int, help="seconds an idle worker is kept")
    p.add_argument("--execution-timeout-ms", type=int, help="a job's longest run, ms")
    p.add_argument(
        "--type", choices=["QUEUE", "LB", "LOAD_BALANCER"],
        help="queue or load-balancing endpoint (create only)",
    )  # fmt: skip
    p.add_argument(
        "--scaler-type", choices=["QUEUE_DELAY", "REQUEST_COUNT"],
        help="how workers are counted (an LB endpoint: REQUEST_COUNT)",
    )  # fmt: skip
    p.add_argument("--scaler-value", type=int, help="the scaler's target (seconds or requests)")
    p.add_argument("--request-timeout-s", type=int, help="an LB request's longest run, s")
    p.add_argument("--lb-hold-s", type=int, help="seconds an LB request waits for a worker")
    p.add_argument(
        "--set", action="append", metavar="FIELD=VALUE",
        help="any field of RunPod's v2 endpoint (docs/rest-v2.md); VALUE is JSON when it "
        "parses, e.g. --set dataCenterIds='[\"US-1\"]'",
    )  # fmt: skip
    p.add_argument("-f", "--file", help="a JSON file of fields (a v2 creation body)")


def add_endpoints(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    actions = group(sub, "endpoints", "list, read, create, edit and delete endpoints")
    run = "lockgate.commands.endpoints"
    action(actions, "list", "every endpoint").set_defaults(
        run=lazy(run, "list_endpoints"), client="management"
    )
    get = action(actions, "get", "one endpoint")
    get.add_argument("endpoint", help="endpoint id")
    get.set_defaults(run=lazy(run, "get_endpoint"), client="management")
    create = action(actions, "create", "create an endpoint")
    create.add_argument("--id", help="refused: v2 generates the id (/v1 or kubectl choose one)")
    endpoint_fields(create)
    create.set_defaults(run=lazy(run, "create_endpoint"), client="management")
    edit = action(actions, "edit", "change some fields of an endpoint; the others stay")
    edit.add_argument("endpoint", help="endpoint id")
    endpoint_fields(edit)
    edit.set_defaults(run=lazy(run, "edit_endpoint"), client="management")
    delete = action(actions, "delete", "delete an endpoint (its jobs and workers go)")
    delete.add_argument("endpoint", help="endpoint id")
    delete.set_defaults(run=lazy(run, "delete_endpoint"), client="management")


def add_templates(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    actions = group(sub, "templates", "list and read templates")
    run = "lockgate.commands.endpoints"
    action(actions, "list", "every template").set_defaults(
        run=lazy(run, "list_templates"), client="management"
    )
    get = action(actions, "get", "one template")
    get.add_argument("template", help="template id")
    get.set_defaults(run=lazy(run, "get_template"), client="management")


def add_jobs(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    actions = group(sub, "jobs", "submit, read, stream, cancel and list jobs")
    run = "lockgate.commands.jobs"
    submit = action(actions, "run", "submit a job (/run; with --wait, until it ends)")
    submit.add_argument("endpoint", help="endpoint id")
    submit.add_argument("input", nargs="?", default="{}", help="JSON input, - (stdin) or @FILE")
    submit.add_argument(
        "--wait", action="store_true",
        help="wait up to 5 min for the result; why the job waits, if it does, goes to stderr",
    )  # fmt: skip
    submit.set_defaults(run=lazy(run, "run_job"), client="jobs")
    status = action(actions, "status", "a job's status and output")
    status.add_argument("endpoint", help="endpoint id")
    status.add_argument("job", help="job id")
    status.add_argument("--wait-ms", type=int, help="wait up to this long for it to end")
    status.set_defaults(run=lazy(run, "job_status"), client="jobs")
    stream = action(actions, "stream", "print a job's stream chunks until it ends")
    stream.add_argument("endpoint", help="endpoint id")
    stream.add_argument("job", help="job id")
    stream.set_defaults(run=lazy(run, "stream_job"), client="jobs")
    cancel = action(actions, "cancel", "cancel a queued or running job")
    cancel.add_argument("endpoint", help="endpoint id")
    cancel.add_argument("job", help="job id")
    cancel.set_defaults(run=lazy(run, "cancel_job"), client="jobs")
    listing = action(actions, "list", "an endpoint's recent jobs, newest first (/requests)")
    listing.add_argument("endpoint", help="endpoint id")
    listing.add_argument("--status", help="only these states, comma-separated")
    listing.add_argument("--limit", type=int, default=20, help="jobs to show (1-100, default 20)")
    listing.set_defaults(run=lazy(run, "list_jobs"), client="jobs")


def add_logs(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    p = sub.add_parser(
        "logs", help="an endpoint's worker log lines", parents=[connection()],
        description="An endpoint's worker log lines (the management API's logs route).",
    )  # fmt: skip
    p.add_argument("endpoint", help="endpoint id")
    p.add_argument("-f", "--follow", action="store_true", help="go on printing new lines")
    p.add_argument("--tail", type=int, default=100, help="last lines to show (default 100)")
    p.add_argument("--worker", help="only this worker's lines")
    p.add_argument("--job", help="only this job's lines")
    p.set_defaults(run=lazy("lockgate.commands.logs", "logs"), client="management")


def add_login(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    p = sub.add_parser(
        "login", help="check a URL and API key and save them for the other commands",
        parents=[connection()],
        description="Check --url and --key against the management API and save them in the "
        "config file (docs/cli.md#the-config-file), mode 0600. Plain http:// to a host that "
        "is not this machine needs --insecure (saved: later commands to it do not ask).",
    )  # fmt: skip
    p.set_defaults(run=lazy("lockgate.commands.login", "login"), client="management")


def add_client_commands(sub: argparse._SubParsersAction, lazy: Lazy) -> None:
    """Every daily-work command, each run through `lazy(module, function)`."""
    for add in (add_endpoints, add_templates, add_jobs, add_logs, add_login):
        add(sub, lazy)
