"""Where the `lockgate` CLI sends its API key: never in clear to another machine without
`--insecure`, and the config file's key only to the URL it was saved for. Real `lockgate`
processes against a local HTTP server that records what it received."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from lockgate import client, clientconfig
from lockgate.clientconfig import Target
from lockgate.commands import session
from tests.test_cli_daily import clean_env, lockgate, ok, one_line_error, own_config


class Recorder(ThreadingHTTPServer):
    """An HTTP server that answers every request `[]` (no endpoints, for the CLI) and keeps
    each request's method, path and Authorization header."""

    def __init__(self, host: str) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.command, self.path, self.headers["authorization"]))
                body = b"[]"
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__((host, 0), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield from serving("127.0.0.1")


def serving(host: str) -> Iterator[Recorder]:
    server = Recorder(host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def this_machines_address() -> str | None:
    """An IPv4 address of one of this machine's own interfaces that is not loopback: a
    server bound there is 'another host' by its URL, yet traffic to it stays here."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


@pytest.fixture
def outside() -> Iterator[Recorder]:
    address = this_machines_address()
    if address is None:
        pytest.skip("no interface other than loopback")
    yield from serving(address)


@pytest.fixture
def saved_for(tmp_path, recorder) -> dict[str, str]:
    """A config file saved by `lockgate login` for `recorder`, and the CLI's environment."""
    env = clean_env(tmp_path / "cfg")
    ok(lockgate("login", "--url", recorder.url, "--key", "k-saved", env=env))
    assert recorder.seen == [("GET", "/v1/endpoints?limit=1", "Bearer k-saved")]
    recorder.seen.clear()
    return env


# The decisions, directly.


@pytest.mark.parametrize(
    ("url", "clear"),
    [
        ("http://192.0.2.2:8080", True),
        ("http://10.0.0.5:8080/v1", True),
        ("http://lockgate.example.com", True),
        ("http://localhost.example.com:8080", True),
        ("HTTP://192.0.2.2", True),
        ("http://127.0.0.1:8080", False),
        ("http://127.8.9.10:1", False),
        ("http://localhost:8080", False),
        ("http://LOCALHOST.:8080", False),
        ("http://[::1]:8080", False),
        ("http://[::ffff:127.0.0.1]:8080", False),
        ("http://0.0.0.0:8080", False),
        ("https://192.0.2.2:8443", False),
        ("https://lockgate.example.com", False),
        ("not a url", False),
    ],
)
def test_plain_http_to_a_host_that_is_not_this_machine_is_in_clear(url, clear) -> None:
    assert client.in_clear(url) is clear


SAVED = {"url": "http://127.0.0.1:8080", "key": "ks", "jobUrl": "http://127.0.0.1:8081"}


@pytest.mark.parametrize(
    ("flags", "env", "jobs", "expected"),
    [
        # the saved URL's origin, written another way: the saved key goes
        ((None, None), {}, False, ("http://127.0.0.1:8080", "ks", None)),
        (("http://127.0.0.1:8080/", None), {}, False, ("http://127.0.0.1:8080/", "ks", None)),
        ((None, None), {"LOCKGATE_URL": "HTTP://127.0.0.1:8080"}, False,
         ("HTTP://127.0.0.1:8080", "ks", None)),
        ((None, None), {}, True, ("http://127.0.0.1:8081", "ks", None)),
        # another scheme, host or port: withheld, naming the saved URL
        (("http://127.0.0.1:9090", None), {}, False,
         ("http://127.0.0.1:9090", None, "http://127.0.0.1:8080")),
        (("https://127.0.0.1:8080", None), {}, False,
         ("https://127.0.0.1:8080", None, "http://127.0.0.1:8080")),
        (("http://localhost:8080", None), {}, False,
         ("http://localhost:8080", None, "http://127.0.0.1:8080")),
        ((None, None), {"LOCKGATE_URL": "http://192.0.2.2:8080"}, False,
         ("http://192.0.2.2:8080", None, "http://127.0.0.1:8080")),
        (("http://127.0.0.1:8080", None), {"LOCKGATE_JOB_URL": "http://192.0.2.2:1"}, True,
         ("http://192.0.2.2:1", None, "http://127.0.0.1:8080")),
        # a key given by flag or variable goes wherever the URL says
        (("http://192.0.2.2:8080", "kf"), {}, False, ("http://192.0.2.2:8080", "kf", None)),
        (("http://192.0.2.2:8080", None), {"LOCKGATE_API_KEY": "ke"}, False,
         ("http://192.0.2.2:8080", "ke", None)),
    ],
)  # fmt: skip
def test_the_saved_key_goes_only_to_the_origins_it_was_saved_for(
    monkeypatch, tmp_path, flags, env, jobs, expected
) -> None:
    own_config(monkeypatch, tmp_path / "c.json", env)
    clientconfig.save(SAVED)
    got = clientconfig.target(*flags, jobs=jobs)
    assert (got.url, got.key, got.withheld) == expected


REMOTE, HERE = "http://192.0.2.2:8080", "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("target", "allowed", "refused", "warned"),
    [
        (Target(HERE, "k"), False, None, False),
        (Target("https://192.0.2.2", "k"), False, None, False),
        (Target(REMOTE, None), False, None, False),  # no key: nothing to keep
        (Target(REMOTE, "k"), False, "not sending the API key in clear", False),
        (Target(REMOTE, "k"), True, None, True),
        (Target(REMOTE, "k", consented=True), False, None, False),  # login --insecure
        (Target(REMOTE, None, withheld=HERE), True, "the saved API key is for", False),
    ],
)  # fmt: skip
def test_whether_a_request_is_made_and_warned(target, allowed, refused, warned) -> None:
    refusal, warning = session.sending(target, allowed=allowed)
    assert (refusal or "").startswith(refused or "") and bool(refusal) is bool(refused)
    assert bool(warning) is warned


# Real `lockgate` processes.


def test_a_command_given_another_url_does_not_send_the_saved_key(
    saved_for, recorder, tmp_path
) -> None:
    for other in serving("127.0.0.1"):
        line = one_line_error(lockgate("endpoints", "list", "--url", other.url, env=saved_for))
        assert line == (
            f"lockgate: the saved API key is for {recorder.url}, not {other.url}: give --key "
            f"or LOCKGATE_API_KEY, or run: lockgate login --url {other.url} --key KEY"
        )
        by_env = lockgate("jobs", "list", "echo", env={**saved_for, "LOCKGATE_URL": other.url})
        assert "the saved API key is for" in one_line_error(by_env)
        assert by_env.returncode == 2
        assert other.seen == []  # nothing at all: the request was not made
        ok(lockgate("endpoints", "list", "--url", other.url, "--key", "k-given", env=saved_for))
        assert other.seen == [("GET", "/v2/serverless", "Bearer k-given")]
    assert recorder.seen == []
    ok(lockgate("endpoints", "list", env=saved_for))  # the saved URL still has it
    assert recorder.seen == [("GET", "/v2/serverless", "Bearer k-saved")]


def test_login_over_plain_http_to_another_host_needs_insecure(outside, tmp_path) -> None:
    env = clean_env(tmp_path / "cfg")
    config = tmp_path / "cfg" / "lockgate" / "config.json"
    refused = lockgate("login", "--url", outside.url, "--key", "k-admin", env=env)
    assert refused.returncode == 2
    line = one_line_error(refused)
    assert f"not sending the API key in clear to {outside.url}" in line and "--insecure" in line
    assert outside.seen == [] and not config.exists()
    # a URL given with the key by the variables is refused the same way
    by_env = {**env, "LOCKGATE_URL": outside.url, "LOCKGATE_API_KEY": "k-admin"}
    assert "--insecure" in one_line_error(lockgate("endpoints", "list", env=by_env))
    assert outside.seen == []

    accepted = lockgate("login", "--url", outside.url, "--key", "k-admin", "--insecure", env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stderr.splitlines()[0] == (
        f"lockgate: warning: the API key goes in clear to {outside.url} (--insecure)"
    )
    assert outside.seen == [("GET", "/v1/endpoints?limit=1", "Bearer k-admin")]
    assert json.loads(config.read_text())["insecure"] is True
    # accepted once at login for that URL: the next commands neither ask nor warn
    listed = lockgate("endpoints", "list", env=env)
    assert listed.returncode == 0 and listed.stderr == ""
    assert outside.seen[-1] == ("GET", "/v2/serverless", "Bearer k-admin")


def test_without_a_key_nothing_is_refused_over_plain_http(outside, tmp_path) -> None:
    env = clean_env(tmp_path / "cfg")
    ok(lockgate("endpoints", "list", "--url", outside.url, env=env))
    assert outside.seen == [("GET", "/v2/serverless", None)]


def test_the_config_file_is_untouched_by_a_refused_login(saved_for, outside, tmp_path) -> None:
    config = Path(saved_for["XDG_CONFIG_HOME"]) / "lockgate" / "config.json"
    before = config.read_text()
    one_line_error(lockgate("login", "--url", outside.url, "--key", "k2", env=saved_for))
    assert config.read_text() == before and outside.seen == []
