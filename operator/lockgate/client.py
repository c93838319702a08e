"""An HTTP client of lockgate's management API (`/v1/...`) and job API (`/v2/{id}/...`), for
the `lockgate` command's daily-work commands.

aiohttp's `ClientSession` (already a dependency of every server process, and the client the
gateway proxies with): no second HTTP stack. Every failure becomes a `ClientError` whose
message is one line that says what to do.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from yarl import URL

CONNECT_TIMEOUT_S = 10.0  # to open a connection; a request may then take as long as it needs
WRONG_KEY = "set --key or LOCKGATE_API_KEY, or run: lockgate login"
LOOPBACK_NAMES = {"localhost"}  # a name that is this machine (/etc/hosts), as curl treats it


class ClientError(Exception):
    """A request could not be made or was refused; the message is one line for the user,
    `status` the HTTP status of a refusal (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotSent(ClientError):
    """A request not made, so as not to send the API key where it should not go, or to a
    URL that cannot be lockgate's (exit 2)."""


def in_clear(url: str) -> bool:
    """Whether a request to `url` crosses a network unencrypted: plain http:// to a host
    that is not this machine. This machine: loopback (127.0.0.0/8, ::1, also IPv4-mapped),
    `localhost`, and the unspecified 0.0.0.0 and :: (Linux connects them to itself). Any
    other name may resolve anywhere, so it counts as remote."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError):
        return False  # not a usable URL: the request fails on its own, sending nothing
    if (parsed.scheme or "").lower() != "http":
        return False  # https, or a scheme aiohttp refuses before connecting
    host = (parsed.host or "").lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not (ip.is_loopback or ip.is_unspecified)


def in_clear_refused(url: str) -> str:
    """The one line of a key kept from a plain-HTTP URL, naming the way past it."""
    return (
        f"not sending the API key in clear to {url} (plain http:// to a host that is not "
        "this machine): use https://, or add --insecure (LOCKGATE_INSECURE=1) if the "
        "network to it is trusted"
    )


def key_withheld(url: str, saved_url: str) -> str:
    """The one line of a saved key kept from a URL of another origin."""
    return (
        f"the saved API key is for {saved_url}, not {url}: give --key or LOCKGATE_API_KEY, "
        f"or run: lockgate login --url {url} --key KEY"
    )


def where_to_set(url: str) -> str:
    """The hint of an unreachable URL."""
    return (
        f"cannot reach {url}: is lockgate dev (or lockgate manage) running? "
        "set --url or LOCKGATE_URL"
    )


def not_a_url(url: str) -> str:
    """The hint of a URL that is not one."""
    return f"{url!r} is not a usable URL: set --url or LOCKGATE_URL, e.g. http://127.0.0.1:8080"


def refused(status: int, error: str, url: str) -> ClientError:
    """The `ClientError` of an HTTP error answer, saying what to do for the common ones."""
    if status == 401:
        # the gateway answers 401 for an unknown key and for a key without the scope
        why = f": {error}" if error else ""
        return ClientError(f"{url} refused the API key (401{why}): {WRONG_KEY}", status)
    if status == 403:
        message = f"the API key may not do this (403: {error}): use a key with that scope"
        return ClientError(message, status)
    return ClientError(f"{error} (HTTP {status})" if error else f"HTTP {status} from {url}", status)


def problem_text(data: dict[str, Any]) -> str | None:
    """An RFC 9457 problem's words (v2's errors): each of a 422's `errors[]`, else `detail`."""
    errors = data.get("errors")
    if isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors):
        return "; ".join(errors)
    detail = data.get("detail")
    return detail if isinstance(detail, str) and detail else None


def error_of(body: bytes) -> str:
    """The `error` of a `{"error": ...}` body, or a problem's words (`problem_text`), else
    the body's first line (cut short); always one line."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return " ".join(data["error"].split())
    if isinstance(data, dict) and (text := problem_text(data)):
        return " ".join(text.split())
    text = body.decode("utf-8", "replace").strip().splitlines()
    return text[0][:200] if text else ""


class ApiClient:
    """Requests to one lockgate URL with one API key; use `async with`."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
        headers = {"authorization": f"Bearer {self.key}"} if self.key else {}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
        self._session = aiohttp.ClientSession(headers=headers, timeout=timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use `async with ApiClient(...)`")
        return self._session

    async def call(
        self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """`method path` with a JSON `body`; the JSON answer (None for 204), or ClientError."""
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            async with self.session.request(
                method, self.url + path, json=body, params=query
            ) as response:
                status, data = response.status, await response.read()
        except (TimeoutError, aiohttp.ClientConnectionError, OSError) as err:
            raise ClientError(where_to_set(self.url)) from err
        except ValueError as err:  # aiohttp.InvalidURL, a port out of range
            raise ClientError(not_a_url(self.url)) from err
        if status >= 400:
            raise refused(status, error_of(data), self.url)
        try:
            return json.loads(data) if data else None
        except ValueError as err:
            raise ClientError(f"{self.url}{path} did not answer JSON: is it lockgate?") from err

    async def events(self, path: str, params: dict[str, Any]) -> AsyncIterator[Any]:
        """The `data:` payloads of a Server-Sent Events stream, parsed as JSON, as they come."""
        query = {k: str(v) for k, v in params.items() if v is not None}
        try:
            async with self.session.get(self.url + path, params=query) as response:
                if response.status >= 400:
                    raise refused(response.status, error_of(await response.read()), self.url)
                async for raw in response.content:
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if line.startswith("data:"):
                        yield json.loads(line[5:].strip())
        except (TimeoutError, aiohttp.ClientConnectionError, OSError) as err:
            raise ClientError(where_to_set(self.url)) from err
        except ValueError as err:
            raise ClientError(not_a_url(self.url)) from err
