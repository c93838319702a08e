"""A load-balancing worker: its own HTTP server (FastAPI on uvicorn), as RunPod's
load-balancing endpoints run one. lockgate proxies `{base_url}/lb/<endpoint>/<path>` to it.

Contract (RunPod's, kept by lockgate): listen on `PORT`; answer `HEALTH_CHECK_PATH`
(default /ping) on `PORT_HEALTH` (here the same server) with 204 while loading and 200
once ready. Routes:
- `GET /ping`: 204 for `LOAD_SECONDS` (default 2) after start, then 200
- `* /echo/{path}` (OPTIONS too): the request as the worker saw it (method, path, query,
  headers, body)
- `GET /set-cookie?v=V`: answers with `Set-Cookie: session=V`
- `GET /slow?s=N`: answers after N seconds
- `GET /sse?n=N`: N Server-Sent Events; with `&hold=<token>`, the last one waits for
  `POST /release/<token>` (so a client can prove it got the first ones before it)
- `WS /ws`: echoes each message
- `POST /v1/chat/completions`: a toy OpenAI-compatible model (streams with `stream: true`)

`CORS_ALLOW_ORIGINS` (comma-separated, or `*`): the worker does its own CORS for these
origins (Starlette's middleware, exposing `x-worker-own`); unset: none.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time

import uvicorn
from fastapi import FastAPI, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse

WORKER_ID = os.environ.get("RUNPOD_POD_ID", "local")
LOAD_SECONDS = float(os.environ.get("LOAD_SECONDS", "2"))
STARTED = time.monotonic()
app = FastAPI()
releases: dict[str, asyncio.Event] = {}
if cors_origins := os.environ.get("CORS_ALLOW_ORIGINS"):
    app.add_middleware(
        CORSMiddleware,
        allow_origins=cors_origins.split(","),
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["x-worker-own"],
    )


def _release(token: str) -> asyncio.Event:
    return releases.setdefault(token, asyncio.Event())


@app.get(os.environ.get("HEALTH_CHECK_PATH", "/ping"))
async def ping() -> Response:
    """204 while the "model" loads, then 200: the balancer routes only to 200."""
    loading = time.monotonic() - STARTED < LOAD_SECONDS
    return Response(status_code=204 if loading else 200)


@app.api_route("/echo/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def echo(request: Request, path: str) -> JSONResponse:
    body = await request.body()
    return JSONResponse(
        {
            "worker": WORKER_ID,
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": dict(request.headers),
            "body": base64.b64encode(body).decode(),
            "bytes": len(body),
        }
    )


@app.get("/set-cookie")
async def set_cookie(v: str = "1") -> JSONResponse:
    """Answers with `Set-Cookie: session=<v>` (a proxy must pass it on, never keep it)."""
    answer = JSONResponse({"worker": WORKER_ID})
    answer.set_cookie("session", v)
    return answer


@app.get("/slow")
async def slow(s: float = 1.0) -> JSONResponse:
    await asyncio.sleep(s)
    return JSONResponse({"worker": WORKER_ID, "slept": s})


@app.post("/release/{token}")
async def release(token: str) -> JSONResponse:
    _release(token).set()
    return JSONResponse({"released": token, "worker": WORKER_ID})


@app.get("/sse")
async def sse(n: int = 3, hold: str = "") -> StreamingResponse:
    async def events():
        for i in range(n):
            if hold and i == n - 1:
                await _release(hold).wait()  # the last event waits for the client's word
            yield f"data: {json.dumps({'i': i, 'worker': WORKER_ID})}\n\n"
            await asyncio.sleep(0)

    return StreamingResponse(events(), media_type="text/event-stream")


@app.websocket("/ws")
async def ws(socket: WebSocket) -> None:
    await socket.accept()
    try:
        while True:
            text = await socket.receive_text()
            await socket.send_text(f"echo: {text}")
    except WebSocketDisconnect:
        return


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    """A toy model: answers with the last user message's words, one token per word."""
    body = await request.json()
    prompt = str((body.get("messages") or [{}])[-1].get("content", ""))
    words = (prompt.split() or ["(nothing)"])[:64]
    model, created = body.get("model", "toy"), int(time.time())
    if not body.get("stream"):
        message = {"role": "assistant", "content": " ".join(words)}
        return JSONResponse(
            {
                "id": "chatcmpl-toy", "object": "chat.completion", "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )  # fmt: skip

    async def chunks():
        for i, word in enumerate(words):
            delta = {"content": (" " if i else "") + word}
            if i == 0:
                delta["role"] = "assistant"
            yield _chunk(model, created, delta, None)
        yield _chunk(model, created, {}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


def _chunk(model: str, created: int, delta: dict, finish: str | None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "chatcmpl-toy", "object": "chat.completion.chunk", "created": created}
    return f"data: {json.dumps({**body, 'model': model, 'choices': [choice]})}\n\n"


if __name__ == "__main__":
    uvicorn.run(
        app,
        host=os.environ.get("HOST", "0.0.0.0"),
        port=int(os.environ.get("PORT", "80")),
        log_level=os.environ.get("LOG_LEVEL", "warning"),
    )
