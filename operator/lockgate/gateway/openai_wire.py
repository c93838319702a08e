"""The OpenAI route's translations, pure: a request into a job input, a finished job into an
HTTP answer, stream chunks into Server-Sent Events (docs/openai.md).

The conventions are RunPod's, so its vLLM worker runs unchanged: the job's input is
`{"openai_route": "/v1/...", "openai_input": <body>}`; the worker yields the OpenAI answer
once (`return_aggregate_stream` makes the output a one-element list), or, for `"stream":
true`, raw SSE text or chunk objects; an OpenAI error object is an answer too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import orjson

from lockgate.store.records import JobRecord

DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
NO_RETRY = {"x-should-retry": "false"}  # the openai SDK would resubmit a 5xx otherwise
REPORT_MAX = 65_536  # characters: a longer job error is not parsed for an OpenAI error
# The job states that end an OpenAI request without an answer from the worker.
_ENDINGS = {
    "FAILED": (500, "handler_error", "the worker's handler failed"),
    "TIMED_OUT": (504, "timeout", "the job ran past its execution timeout"),
    "CANCELLED": (500, "cancelled", "the job was cancelled"),
}


def route_of(path: str) -> str | None:
    """The worker's `openai_route` for the path after `/openai/`; None when it is not an
    OpenAI API path (`v1/...`, printable, no empty segment)."""
    if not path.startswith("v1/") or len(path) == 3 or "//" in path or not path.isprintable():
        return None
    return "/" + path


def job_input(route: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """The job input a worker gets; a GET (no body) carries the route alone, as RunPod's."""
    return (
        {"openai_route": route} if body is None else {"openai_route": route, "openai_input": body}
    )


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's error `type` for a gateway refusal with `status`."""
    return _ERROR_TYPES.get(status, "server_error")


def wants_stream(body: dict[str, Any] | None) -> bool:
    """Whether the client asked for Server-Sent Events."""
    return body is not None and body.get("stream") is True


def error_body(message: str, kind: str, code: str | int | None = None) -> dict[str, Any]:
    """An OpenAI error object, as the openai SDK reads it."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def worker_error(value: Any) -> tuple[int, dict[str, Any]] | None:
    """(status, body) when a worker's answer is an OpenAI error: `{"error": {...}}`, or vLLM's
    older `{"object": "error", "message", "type", "code"}`; None for any other answer.
    An integer `code` from 400 to 599 is the status; otherwise 500."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("error"), dict):
        error = value["error"]
    elif value.get("object") == "error" and isinstance(value.get("message"), str):
        error = {k: value.get(k) for k in ("message", "type", "param", "code")}
    else:
        return None
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    return status, {"error": error}


def reported_error(error: str | None) -> tuple[int, dict[str, Any]] | None:
    """(status, body) when a FAILED job's error text is an OpenAI error object: a handler
    that yields (or returns) `{"error": {...}}` fails its job in both runtimes, which keep
    the inner object as JSON (lockgate's, and the runpod SDK for a return) or as Python's
    `str()` of it (the runpod SDK for a yield, as RunPod's vLLM worker does)."""
    if not error or not error.startswith("{") or len(error) > REPORT_MAX:
        return None
    for parse in (orjson.loads, ast.literal_eval):
        try:
            value = parse(error)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict) and isinstance(value.get("message"), str):
            return worker_error({"error": value})
    return None


def unwrap(output: Any) -> Any:
    """The worker's answer in a job output: the one element of an aggregated stream."""
    if isinstance(output, list) and len(output) == 1:
        return output[0]
    return output


def handler_message(error: str | None) -> str:
    """The message of a failed job's error: the runpod SDK's JSON report gives its
    `error_message`, lockgate's runtime a `Type: message` line."""
    if not error:
        return ""
    try:
        report = orjson.loads(error)
    except orjson.JSONDecodeError:
        return error
    if isinstance(report, dict) and isinstance(report.get("error_message"), str):
        return str(report["error_message"])
    return error


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, JSON body, extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def ending(record: JobRecord) -> Answer:
    """The answer for a job that ended without a usable output (FAILED, TIMED_OUT,
    CANCELLED), OpenAI-shaped: a worker's own OpenAI error as it gave it."""
    if record.status == "FAILED" and (reported := reported_error(record.error)) is not None:
        return worker_answer(*reported)
    status, kind, what = _ENDINGS[record.status]
    detail = handler_message(record.error)
    message = f"{what}: {detail}" if detail and record.status != "FAILED" else detail or what
    return Answer(status, error_body(message, kind, record.status.lower()), NO_RETRY)


def answer(record: JobRecord) -> Answer:
    """The HTTP answer for a final job of a non-streaming request."""
    if record.status != "COMPLETED":
        return ending(record)
    output = unwrap(orjson.loads(record.output)) if record.output else None
    if (error := worker_error(output)) is not None:
        return worker_answer(*error)
    return Answer(200, output)


def worker_answer(status: int, body: dict[str, Any]) -> Answer:
    """A worker's OpenAI error; a 5xx is not retried (the worker answered it)."""
    return Answer(status, body, NO_RETRY if status >= 500 else {})


def waited_too_long(wait_s: float) -> Answer:
    """The answer when the job is not done within the longest wait (it is cancelled)."""
    message = f"no answer within {wait_s:g} s (LOCKGATE_OPENAI_WAIT_S); the job was cancelled"
    return Answer(504, error_body(message, "timeout", "wait_exceeded"), NO_RETRY)


def sse(value: Any) -> bytes:
    """One Server-Sent Event carrying `value` as JSON."""
    return b"data: " + orjson.dumps(value) + b"\n\n"


class StreamFramer:
    """Turns the stored stream chunks of a job (`{"output": ...}`, maybe split) into SSE.

    A string output is raw SSE text (the vLLM worker's default): passed byte for byte; a
    list is one event per element (its non-raw mode); anything else one event. `finish`
    ends the stream with `data: [DONE]` unless the raw text carried it."""

    def __init__(self) -> None:
        self.sent = 0  # chunks framed so far
        self._tail = "\n\n"  # the last characters of raw text sent (event boundaries)
        self._done = False
        self._pieces: list[str] = []  # a split output being put back together

    def feed(self, stored: bytes) -> bytes:
        """The SSE bytes for one stored chunk (b"" while a split output is incomplete)."""
        chunk = orjson.loads(stored)
        split = chunk.get("split")
        output = chunk.get("output")
        if split:
            self._pieces.append(output)
            if split["index"] < split["count"] - 1:
                return b""
            text, self._pieces = "".join(self._pieces), []
            output = text if split["format"] == "text" else orjson.loads(text)
        return self.frame(output)

    def frame(self, output: Any) -> bytes:
        """The SSE bytes for one chunk's output."""
        self.sent += 1
        if isinstance(output, str):
            seen = self._tail + output
            self._done = self._done or "data: [DONE]" in seen
            self._tail = seen[-16:]
            return output.encode()
        values = output if isinstance(output, list) else [output]
        return self._boundary() + b"".join(sse(v) for v in values)

    @property
    def done(self) -> bool:
        """Whether the worker's raw text carried `data: [DONE]`: its client has it all."""
        return self._done

    def finish(self) -> bytes:
        """The bytes that end the stream."""
        return self._boundary() + (b"" if self._done else DONE)

    def _boundary(self) -> bytes:
        """Newlines that end raw text's last event, if it did not end itself."""
        missing = (
            b"" if self._tail.endswith("\n\n") else b"\n" if self._tail.endswith("\n") else b"\n\n"
        )
        self._tail = "\n\n"
        return missing


class LiveChunks:
    """A live job's chunks in the order the worker sent them, each once: from the events
    that carried them (no read needed) and from reads of the stored stream (chunks too large
    to carry, events missed, and to drain what is stored now and then)."""

    READ_EVERY_BYTES = 1024 * 1024  # carried chunks are still stored: drain them this often

    def __init__(self, *, read_every_s: float, now: float) -> None:
        self.read_every_s = read_every_s
        self.expected = 0  # the number of the next chunk to hand out
        self.gap = False  # a chunk was not carried: read
        self.carried = 0  # bytes handed out from events since the last read
        self.last_read = now

    def carried_chunks(self, pushed: list[tuple[int, list[bytes] | None]]) -> list[bytes]:
        """The chunks events carried that come next, in order; past a gap, none."""
        out: list[bytes] = []
        for first, chunks in pushed:
            if self.gap or chunks is None or first > self.expected:
                self.gap = True
                continue
            fresh = chunks[self.expected - first :]
            out += fresh
            self.expected += len(fresh)
            self.carried += sum(map(len, fresh))
        return out

    def read_due(self, now: float, *, ended: bool) -> bool:
        """Whether to read the stored stream now (`ended`: the job ended, or events may
        have been missed)."""
        late = now - self.last_read >= self.read_every_s
        return ended or self.gap or late or self.carried >= self.READ_EVERY_BYTES

    def stored_chunks(self, stored: list[bytes], first: int, now: float) -> list[bytes]:
        """The chunks of a read (numbered from `first`) not handed out yet."""
        self.last_read, self.carried, self.gap = now, 0, False
        fresh = stored[max(0, self.expected - first) :]
        self.expected = max(self.expected, first + len(stored))
        return fresh
