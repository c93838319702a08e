"""An LB worker that writes its answers byte by byte as a test asks (asyncio streams, one
request per connection), for answers no framework would send. On `PORT`:

- `GET /ping`: 200 (its body `PING_BYTES` long, default 0, written until the reader leaves)
- `GET /pings`: JSON `{"pings": N, "written": B}`: the health polls so far and the most
  ping body bytes the gateway took from one of them
- `* /target...`: the request target as the worker got it (the body, text)
- `GET /big-header?bytes=N[&end=1]`: a head whose `X-Big` value is N bytes, never ended
  (with `end`: ended, then `ok`)
- `GET /many-headers?n=N`: N headers, then `ok`
- `GET /large?bytes=N[&chunked=1]`: a body of N bytes (`Content-Length`, or chunked)
"""

from __future__ import annotations

import asyncio
import json
import os
from urllib.parse import parse_qs, urlsplit

PIECE = 1024 * 1024
stats = {"pings": 0, "written": 0}


async def write_many(writer: asyncio.StreamWriter, total: int, piece: bytes) -> int:
    """Write `total` bytes of `piece` repeated; the bytes written before the reader left."""
    written = 0
    while written < total:
        part = piece[: total - written]
        writer.write(part)
        await writer.drain()
        written += len(part)
    return written


def answer(body: bytes, *, head: str = "") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nConnection: close\r\n{head}Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def serve(target: str, writer: asyncio.StreamWriter) -> None:
    path = urlsplit(target).path if target.startswith("/") else target
    query = {k: v[-1] for k, v in parse_qs(urlsplit(target).query).items()}
    if path == "/ping":
        stats["pings"] += 1
        size = int(os.environ.get("PING_BYTES", "0"))
        writer.write(
            f"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {size}\r\n\r\n".encode()
        )
        written = 0
        try:
            written = await write_many(writer, size, b"p" * PIECE)
        finally:
            stats["written"] = max(stats["written"], written)
    elif path == "/pings":
        writer.write(answer(json.dumps(stats).encode()))
    elif path.startswith("/target") or not target.startswith("/"):
        writer.write(answer(target.encode("latin-1")))
    elif path == "/big-header":
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nX-Big: ")
        await write_many(writer, int(query["bytes"]), b"v" * PIECE)
        if query.get("end"):
            writer.write(b"\r\nContent-Length: 2\r\n\r\nok")
        else:
            await asyncio.sleep(3600)  # the head never ends
    elif path == "/many-headers":
        lines = "".join(f"X-{i}: v\r\n" for i in range(int(query["n"])))
        writer.write(answer(b"ok", head=lines))
    elif path == "/large":
        size = int(query["bytes"])
        if query.get("chunked"):
            writer.write(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"%x\r\n%s\r\n" % (PIECE, b"c" * PIECE)
            for _ in range(size // PIECE):
                writer.write(chunk)
                await writer.drain()
            rest = size % PIECE
            writer.write((b"%x\r\n%s\r\n" % (rest, b"c" * rest) if rest else b"") + b"0\r\n\r\n")
        else:
            writer.write(
                f"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {size}\r\n\r\n".encode()
            )
            await write_many(writer, size, b"c" * PIECE)
    else:
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
        await serve(target, writer)
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(on_connection, "127.0.0.1", int(os.environ["PORT"]))
    async with server:
        await server.serve_forever()


asyncio.run(main())
